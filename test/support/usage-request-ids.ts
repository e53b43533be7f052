import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";

/** The request ids of the usage rows in the SQLite database of the data dir `dataDir`, read-only. */
export function usageRequestIdsIn(dataDir: string): string[] {
  const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"), { readonly: true });
  try {
    return database
      .prepare("select request_id from usage_records")
      .all()
      .map((row) => (row as { request_id: string }).request_id);
  } finally {
    database.close();
  }
}
