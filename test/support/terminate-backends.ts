import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { postgresBaseUrl } from "./services.js";

/**
 * A PostgreSQL URL (a test schema's) whose sessions carry an application_name of their own, so that
 * `terminateBackendsHeld` terminates theirs alone, never another test's on the shared server.
 */
export function namedSessions(url: string): { url: string; applicationName: string } {
  const applicationName = `sluice_terminated_${randomBytes(4).toString("hex")}`;
  return {
    url: `${url}${url.includes("?") ? "&" : "?"}application_name=${applicationName}`,
    applicationName,
  };
}

/**
 * Terminates the backends of the sessions named `applicationName` (`pg_terminate_backend`, as a
 * restart, a failover or a pooler dropping idle connections closes them) and waits until they are
 * gone, from another process (psql) while this one's event loop is held: the server has closed the
 * pool's connections, but the pool has not heard yet, as when requests are read before the close
 * (under load) or a network is slow to pass it on. Returns how many it terminated.
 */
export function terminateBackendsHeld(applicationName: string): number {
  // Materialized: the sessions are chosen first, and only theirs are terminated.
  const terminated = execFileSync(
    "psql",
    [
      postgresBaseUrl,
      "-At",
      "-c",
      `with named as materialized (
         select pid from pg_stat_activity where application_name = '${applicationName}' and pid <> pg_backend_pid()
       ) select count(*) filter (where pg_terminate_backend(pid, 5000)) from named`,
    ],
    { encoding: "utf8" },
  );
  return Number(terminated.trim());
}
