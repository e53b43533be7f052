import { createRequire } from "node:module";
import type * as KyselyModule from "kysely";

/**
 * Kysely's values, from its CommonJS build (the same version and code as its ES module build). Its
 * index is 265 modules: Node 20's ES module loader reads, resolves and links them one by one,
 * asynchronously, ~290 ms of CPU here, the largest item of the start (docs/decisions/0005);
 * `require` loads the same modules in ~190. Every value Sluice takes from Kysely comes from here, so
 * a process holds one copy; types come from "kysely" as usual. This is how the sources load it
 * (tsx: tests, `npm run dev`); the production build, one bundle, takes the same values from the ES
 * module build instead, bundled (scripts/build.js, docs/decisions/0017).
 */
const kysely = createRequire(import.meta.url)("kysely") as typeof KyselyModule;

export const Kysely = kysely.Kysely;
export type Kysely<DB> = KyselyModule.Kysely<DB>;
export const { Migrator, PostgresAdapter, PostgresDialect, SqliteDialect, sql } = kysely;
