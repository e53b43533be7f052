import { writeFileSync } from "node:fs";

/**
 * Preloaded into a spawned gateway (`--import`): what a dependency prints outside the log, on
 * demand. SIGUSR2 writes to stdout and stderr as a package's `console.log`/`console.warn` and a
 * Node deprecation warning do, then creates the file `SLUICE_TEST_PRINTED` names, so the test knows
 * the writes were made.
 */
process.on("SIGUSR2", () => {
  console.log("a dependency's notice");
  console.warn("a dependency's warning");
  process.emitWarning("a dependency's deprecation", {
    type: "DeprecationWarning",
    code: "DEP_SLUICE_TEST",
  });
  const printed = process.env.SLUICE_TEST_PRINTED;
  if (printed) writeFileSync(printed, "printed");
});
