import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";

/**
 * The values of `column` in the usage rows of the SQLite database of the data dir `dataDir`, read
 * only; in the column's order when `sorted`, else in the table's.
 */
export function usageColumnIn<T>(dataDir: string, column: "request_id" | "status", sorted = false): T[] {
  const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"), { readonly: true });
  try {
    return database
      .prepare(`select ${column} from usage_records${sorted ? ` order by ${column}` : ""}`)
      .all()
      .map((row) => (row as Record<string, T>)[column] as T);
  } finally {
    database.close();
  }
}

/** The request ids of the usage rows in the SQLite database of the data dir `dataDir`, read-only. */
export function usageRequestIdsIn(dataDir: string): string[] {
  return usageColumnIn<string>(dataDir, "request_id");
}

/**
 * The status and outcome of the usage row `requestId` in the SQLite database of the data dir
 * `dataDir`, read-only; undefined when there is none.
 */
export function usageRowIn(
  dataDir: string,
  requestId: string | null,
): { status: number; outcome: string } | undefined {
  const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"), { readonly: true });
  try {
    return database
      .prepare("select status, outcome from usage_records where request_id = ?")
      .get(requestId ?? "") as { status: number; outcome: string } | undefined;
  } finally {
    database.close();
  }
}
