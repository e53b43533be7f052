import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { Kysely, SqliteDialect, sql } from "./kysely.js";
import { cachingStatements } from "./statement-cache.js";

describe("cachingStatements", () => {
  let database: Database.Database;
  afterEach(() => {
    if (database.open) database.close();
  });

  it("prepares a text once and hands the same statement back", () => {
    database = new Database(":memory:");
    const cached = cachingStatements(database);
    const first = cached.prepare("select 1 as one");
    expect(cached.prepare("select 1 as one")).toBe(first);
    expect(cached.prepare("select 2 as two")).not.toBe(first);
  });

  it("gives a fresh statement while the held one is still iterating", () => {
    database = new Database(":memory:");
    const cached = cachingStatements(database);
    const held = cached.prepare("select value from json_each('[1,2,3]')");
    const rows = held.iterate([]);
    rows.next();
    const other = cached.prepare("select value from json_each('[1,2,3]')");
    expect(other).not.toBe(held);
    expect(other.all([])).toEqual([{ value: 1 }, { value: 2 }, { value: 3 }]);
    rows.return?.();
    expect(cached.prepare("select value from json_each('[1,2,3]')")).toBe(held);
  });

  it("holds at most its bound, dropping the least recently used text", () => {
    database = new Database(":memory:");
    const cached = cachingStatements(database, 2);
    const a = cached.prepare("select 'a'");
    const b = cached.prepare("select 'b'");
    expect(cached.prepare("select 'a'")).toBe(a);
    cached.prepare("select 'c'");
    expect(cached.prepare("select 'a'")).toBe(a);
    expect(cached.prepare("select 'b'")).not.toBe(b);
  });

  it("serves Kysely's queries across a schema change and closes the database", async () => {
    database = new Database(":memory:");
    const db = new Kysely<{ t: { id: number; name?: string } }>({
      dialect: new SqliteDialect({ database: cachingStatements(database) }),
    });
    await sql`create table t (id integer primary key)`.execute(db);
    await db.insertInto("t").values({ id: 1 }).execute();
    expect(await db.selectFrom("t").selectAll().execute()).toEqual([{ id: 1 }]);
    await sql`alter table t add column name text default 'x'`.execute(db);
    expect(await db.selectFrom("t").selectAll().execute()).toEqual([{ id: 1, name: "x" }]);
    await db.transaction().execute(async (transaction) => {
      await transaction.insertInto("t").values({ id: 2, name: "y" }).execute();
    });
    expect(await db.selectFrom("t").select("name").orderBy("id").execute()).toEqual([
      { name: "x" },
      { name: "y" },
    ]);
    await db.destroy();
    expect(database.open).toBe(false);
  });
});
