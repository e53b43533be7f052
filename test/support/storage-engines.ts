import { type OpenDatabase, openDatabase } from "../../src/storage/database.js";
import { createPostgresSchema, postgresAvailable } from "./services.js";

/** One storage engine for a suite that runs on both: a fresh database each `open`. */
export interface StorageEngine {
  name: "SQLite" | "PostgreSQL";
  /** PostgreSQL answers (or CI requires it: services.ts then fails the import). */
  available: boolean;
  open(): Promise<{ database: OpenDatabase; cleanup(): Promise<void> }>;
}

/** SQLite in memory, and PostgreSQL in a schema of its own that `cleanup` drops. */
export const storageEngines: StorageEngine[] = [
  {
    name: "SQLite",
    available: true,
    async open() {
      const database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
      return { database, cleanup: async () => {} };
    },
  },
  {
    name: "PostgreSQL",
    available: postgresAvailable,
    async open() {
      const schema = await createPostgresSchema();
      const database = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
      return { database, cleanup: schema.drop };
    },
  },
];
