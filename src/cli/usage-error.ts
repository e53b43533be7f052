/** A command line the `sluice` command cannot run: exit code 2, found before anything is opened. */
export class UsageError extends Error {}
