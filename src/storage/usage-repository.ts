import type BetterSqlite3 from "better-sqlite3";
import { GatewayError } from "../errors.js";
import {
  addCostTotals,
  type CostSumColumns,
  type CostTotal,
  costSumColumns,
  costSumSelection,
  costTotalOf,
  noCost,
  usdOf,
} from "./cost-sums.js";
import type { RunReport } from "./database.js";
import { type Kysely, sql } from "./kysely.js";
import type { Database, UsageRecordsTable } from "./schema.js";
import { waitingOutLocks } from "./sqlite-lock-wait.js";

export type UsageRecord = UsageRecordsTable;
type UsageGroupBy = "day" | "model" | "endpoint";

export interface UsageReportRow {
  group: string | null;
  /** Requests: the rows' `requests` summed (a row of coalesced refusals counts each it stands for). */
  requests: number;
  /** Requests whose outcome is not ok, counted as `requests` is. */
  errors: number;
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
  /**
   * Sum of known costs, summed exactly in billionths and rounded once (cost-sums.ts); null when no
   * row in the group had a known cost.
   */
  costUsd: number | null;
  /** Requests whose cost was unknown (null), so a report never passes them off as free. */
  unpricedRequests: number;
}

export interface UsageQuery {
  projectId: string;
  from: string;
  to: string;
  /**
   * The project's creation (at or before `from`): the rows of calls begun before it are left out
   * (`begunFrom`), a project's deleted under the id whose calls ended after it, whatever the window
   * (one that starts after the creation too). Only a row of a call longer than `from` is after it
   * can be one: the others are not tested (`reportQuery`).
   */
  begunFrom?: string | undefined;
  groupBy: UsageGroupBy;
  /**
   * The groups a report answers at most: the first ones in the report's order (`compareGroups`).
   * A project's models are named by its clients (a proxied call records the model its body names),
   * so the groups have no bound of their own.
   */
  limit: number;
  /** Only the groups after this one in the report's order (the last group of the page before). */
  after?: string | undefined;
}

/** A project's known spend over a span (`UsageRepository.spendSince`), in USD. */
export interface SpendSince {
  /** The known costs summed (0 when none is known), exactly in billionths, rounded once (cost-sums.ts). */
  totalUsd: number;
  /** The largest known cost of one row (one call), 0 when none is known. */
  largestUsd: number;
  /**
   * The calls of unknown cost (`countsAsUnpriced`, the rows' `requests` summed): those the usage
   * report's `unpricedRequests` counts, which the spend cap counts at an estimate (decision 0057).
   */
  unpricedCalls: number;
  /**
   * On SQLite, the figure this read left for the project and span: given to the next read of them
   * (`spendSince`'s `after`), that read adds only the rows written since. None on PostgreSQL.
   */
  next?: SpendMark | undefined;
}

/**
 * A project's figure that a SQLite repository carries on (`SpendSince.next`): the spend since `from`
 * it read, which it keeps up to date with the rows written since, walked once for every figure it
 * carries (`sqliteSpendReads`). A read given it adds only the rows written since the last walk; a
 * read given none, or one the repository no longer carries (another span, or let go), is a full one.
 */
export interface SpendMark {
  readonly projectId: string;
  readonly from: string;
  /** `spendSince`'s `fromCreation` (false when not given). */
  readonly fromCreation?: boolean | undefined;
}

export interface UsageRepository {
  /** Inserts rows; a request id already stored is skipped, so a retried batch never duplicates. */
  insertBatch(rows: readonly UsageRecord[]): Promise<void>;
  /** The first `limit` groups (after `after`), in code-point order of the group, a null group last. */
  report(query: UsageQuery): Promise<UsageReportRow[]>;
  /**
   * Known spend (USD) of a project since `from` (ISO), and the largest cost of one row in it. Given
   * `after`, the last read's `next` for the same project and `from`, SQLite adds only the rows
   * written since (the answer is the same as a full read's). `fromCreation`: `from` is the
   * project's creation, and the rows of calls begun before it are left out (`begunFrom`).
   */
  spendSince(projectId: string, from: string, after?: SpendMark, fromCreation?: boolean): Promise<SpendSince>;
  /** Requests recorded (the rows' `requests` summed: a coalesced row counts all it stands for). */
  count(projectId?: string): Promise<number>;
  /**
   * Deletes at most `limit` rows created before `before` (ISO), the oldest first, in one short
   * statement of its own; answers how many it deleted (fewer than `limit`: none older are left).
   */
  deleteBefore(before: string, limit: number): Promise<number>;
}

const insertChunk = 500;

/** Rows of a project one statement of a report or of a spend guard's full read aggregates at most, on SQLite (`sliceEnd`). */
export const reportSliceRows = 5000;

/** The table's columns, in the order SQLite's batch writer binds them and the log writes a dropped row's. */
export const usageColumns = [
  "request_id",
  "project_id",
  "key_id",
  "endpoint",
  "provider",
  "model",
  "status",
  "error_code",
  "input_tokens",
  "output_tokens",
  "cached_tokens",
  "reasoning_tokens",
  "cost_usd",
  "latency_ms",
  "ttfb_ms",
  "streamed",
  "outcome",
  "auth_method",
  "client_ip",
  "created_at",
  "requests",
  "provider_answered",
] as const satisfies ReadonlyArray<keyof UsageRecord>;
const columns = usageColumns;

/**
 * Inserts `rows` (all holding the same columns; the others take their defaults) in one statement,
 * skipping each whose request id is stored already (or comes earlier in `rows`), and answers how
 * many it inserted: `sluice usage import`'s writes, which count what they add.
 */
export async function insertUsageRowsCounted(
  db: Kysely<Database>,
  rows: readonly Partial<UsageRecord>[],
): Promise<number> {
  if (rows.length === 0) return 0;
  const result = await db
    .insertInto("usage_records")
    .values(rows as UsageRecord[])
    .onConflict((conflict) => conflict.column("request_id").doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0);
}

/**
 * Usage rows through the shared Kysely queries. On the embedded SQLite engine, batches are
 * written with two cached prepared statements inside a transaction instead: compiling and
 * preparing a fresh 500-row INSERT per batch cost more CPU than the whole rest of a proxied
 * request's bookkeeping (see docs/decisions/0005). Reads always go through Kysely, and the report
 * through `runReport` (the open database's, for its own time limit on PostgreSQL) when given.
 */
export function createUsageRepository(
  db: Kysely<Database>,
  sqlite?: BetterSqlite3.Database,
  runReport: RunReport = (read) => read(db),
): UsageRepository {
  const writeSqlite = sqlite ? sqliteBatchWriter(db, sqlite) : null;
  const spendSqlite = sqlite ? sqliteSpendReads(db) : null;
  return {
    async insertBatch(rows) {
      if (rows.length === 0) return;
      if (writeSqlite) return writeSqlite(rows);
      await db.transaction().execute(async (transaction) => {
        for (let start = 0; start < rows.length; start += insertChunk) {
          await transaction
            .insertInto("usage_records")
            .values(rows.slice(start, start + insertChunk))
            .onConflict((conflict) => conflict.column("request_id").doNothing())
            .execute();
        }
      });
    },
    async report({ projectId, from, to, begunFrom, limit, groupBy, after }) {
      const query = { projectId, from, to, begunFrom, groupBy, limit, after };
      const rows = await runReport((reader) =>
        sqlite ? slicedReport(reader, query) : reportQuery(reader, query, true).execute().then(toSums),
      ).catch((error: unknown) => {
        throw (error as { code?: unknown } | null)?.code === queryCanceled ? reportCancelled(error) : error;
      });
      // The statement's order (code points, null last), which SQLite's slices lose when merged.
      rows.sort((left, right) => compareGroups(left.group_key, right.group_key));
      return rows.map((row) => ({
        group: row.group_key,
        requests: Number(row.requests),
        errors: Number(row.errors),
        inputTokens: Number(row.input_tokens),
        outputTokens: Number(row.output_tokens),
        cachedTokens: Number(row.cached_tokens),
        reasoningTokens: Number(row.reasoning_tokens),
        costUsd: row.cost === null ? null : usdOf(row.cost),
        unpricedRequests: Number(row.unpriced),
      }));
    },
    async spendSince(projectId, from, after, fromCreation = false) {
      if (spendSqlite) return spendSqlite(projectId, from, after, fromCreation);
      const row = await spendQuery(db, projectId, from, true, fromCreation).executeTakeFirst();
      const total = row ? costTotalOf(row) : null;
      return {
        totalUsd: usdOf(total ?? noCost),
        largestUsd: Number(row?.largest ?? 0),
        unpricedCalls: Number(row?.unpriced ?? 0),
      };
    },
    async count(projectId) {
      let query = db.selectFrom("usage_records").select(sql<number>`coalesce(sum(requests), 0)`.as("n"));
      if (projectId) query = query.where("project_id", "=", projectId);
      const row = await query.executeTakeFirst();
      return Number(row?.n ?? 0);
    },
    async deleteBefore(before, limit) {
      const result = await pruneQuery(db, before, limit, sqlite === undefined).executeTakeFirst();
      return Number(result.numDeletedRows);
    },
  };
}

/**
 * The queries the usage table answers, built apart so a test can ask each engine for its plan
 * (usage-query-plans.test.ts): each must find its rows through an index, as the table grows
 * without bound unless SLUICE_USAGE_RETENTION_DAYS is set.
 */

/**
 * Whether a usage row is a call of unknown cost, as the usage report's `unpricedRequests` and the
 * spend cap count them (`unpricedRequestsSum` in SQL): its cost is unknown and its call went through
 * (ok, or cut short), or failed but reports tokens, or failed after the provider answered it with a
 * success (`provider_answered`: an answer Sluice could not read), both of which the provider billed.
 * A refusal or another failure without tokens cost nothing. Also a row whose cost, known or not,
 * leaves out a billed part of unknown usage (`provider_answered` 2: a structured repair's answer not
 * read), counted at its cost (if known) and at the estimate both (decision 0057, amended).
 */
export function countsAsUnpriced(
  row: Pick<UsageRecord, "cost_usd" | "outcome" | "input_tokens" | "output_tokens" | "provider_answered">,
): boolean {
  return (
    row.provider_answered === 2 ||
    (row.cost_usd === null &&
      (row.outcome !== "error" ||
        row.input_tokens !== null ||
        row.output_tokens !== null ||
        row.provider_answered === 1))
  );
}

/**
 * The requests of the rows `countsAsUnpriced` counts, summed (0 when none), over the columns of
 * `table` (the statement's table when not given).
 */
function unpricedRequestsSum(table?: string) {
  const column = (name: string) => sql.ref(table === undefined ? name : `${table}.${name}`);
  return sql<number>`coalesce(sum(case when ${column("provider_answered")} = 2 or (${column("cost_usd")} is null and (${column("outcome")} <> 'error' or ${column("input_tokens")} is not null or ${column("output_tokens")} is not null or ${column("provider_answered")} = 1)) then ${column("requests")} else 0 end), 0)`;
}

/**
 * A project's known spend since `from`, its largest cost of one row, and its calls of unknown cost
 * (`countsAsUnpriced`): the spend guard's month-to-date read (index on project, time). The max and
 * the count read the rows the sum reads, no others.
 * Costs are summed exactly, in whole billionths (cost-sums.ts), as the report sums them, so a sum
 * carried on from an earlier one (`sqliteSpendReads`) is the same as one read whole, on either engine.
 */
export function spendQuery(
  db: Kysely<Database>,
  projectId: string,
  from: string,
  postgres: boolean,
  fromCreation = false,
) {
  return db
    .selectFrom("usage_records")
    .select([
      ...costSumSelection(postgres),
      sql<number | null>`max(cost_usd)`.as("largest"),
      unpricedRequestsSum().as("unpriced"),
    ])
    .where("project_id", "=", projectId)
    .where("created_at", ">=", from)
    .$if(fromCreation, (query) => query.where(begunFrom(from, postgres)));
}

/**
 * The rows of calls begun at `from` or after: a row is stamped when its call ends (`created_at`), and
 * began `latency_ms` before, within the millisecond the stamp is cut to (1 ms allowed; the times'
 * difference in whole milliseconds, as they are stamped: SQLite's julian days, as doubles, are
 * rounded back to them). Asked from
 * a project's creation: a call of a project deleted under its id that ended after the new one was
 * created is the deleted one's, not the new one's (its calls all begin after its creation).
 */
function begunFrom(from: string, postgres: boolean, table?: string) {
  const column = (name: string) => sql.ref(table === undefined ? name : `${table}.${name}`);
  const at = table === undefined ? sql`${from}` : sql.ref(from);
  return postgres
    ? sql<boolean>`extract(epoch from (${column("created_at")}::timestamptz - ${at}::timestamptz)) * 1000 + 1 > ${column("latency_ms")}`
    : sql<boolean>`round((julianday(${column("created_at")}) - julianday(${at})) * 86400000.0) + 1 > ${column("latency_ms")}`;
}

/** Rows of the table one statement of a SQLite spend read goes over at most (`sqliteSpendReads`). */
export const spendSliceRows = 5000;

/** Figures a SQLite repository carries on at most: past them, the one read longest ago goes. */
const spendFiguresCarried = 10_000;

/**
 * SQLite: the figures each repository on the connection carries on (`sqliteSpendReads`), by the
 * repository's number (`owner`): a table of the connection's own (`temp`), never in the file.
 */
const createSpendCarried = sql`create temp table if not exists spend_carried (
  owner integer not null,
  project_id text not null,
  from_at text not null,
  from_creation integer not null default 0,
  primary key (owner, project_id)
) without rowid`;

/** Repositories on SQLite so far: each carries its figures under a number of its own. */
let spendOwners = 0;

/**
 * SQLite: the known costs of the rows whose rowid is above `after` and at most `upTo`, summed for
 * each project `owner` carries a figure of, from the figure's `from` on. Walked by rowid (`not
 * indexed`: never the index on project and time, which holds every month), each row looked up in
 * `spend_carried` by its key, so the statement reads those rows and no others, and costs the same
 * however many figures are carried. A first row (its `project_id` null) answers, in the same
 * statement, the table's largest rowid and that row's request id (where the next walk begins), and
 * the request id of the row at `after` (where this one does: the row the walk before saw there?).
 */
export function spendWalkQuery(owner: number, after: number, upTo: number) {
  const costs = costSumColumns(false, sql.ref("usage.cost_usd"));
  return sql<
    SpendSumRow & {
      project_id: string | null;
      top: number | null;
      top_request: string | null;
      anchor: string | null;
    }
  >`select null as project_id, null as cost_whole, null as cost_part, null as cost_beyond, null as largest,
    null as unpriced, (select max(rowid) from usage_records) as top,
    (select request_id from usage_records where rowid = (select max(rowid) from usage_records)) as top_request,
    (select request_id from usage_records where rowid = ${after}) as anchor
  union all
  select usage.project_id, ${costs.cost_whole}, ${costs.cost_part}, ${costs.cost_beyond}, max(usage.cost_usd),
    ${unpricedRequestsSum("usage")}, null, null, null
  from usage_records as usage not indexed
  cross join temp.spend_carried as carried
    on carried.owner = ${owner} and carried.project_id = usage.project_id and usage.created_at >= carried.from_at
  where usage.rowid > ${after} and usage.rowid <= ${upTo}
    and (carried.from_creation = 0 or ${begunFrom("carried.from_at", false, "usage")})
  group by usage.project_id`;
}

/**
 * SQLite: a project's spend since `from` over the rows whose rowid is above `after` and at most
 * `upTo`, walked by rowid as `spendWalkQuery` walks them.
 */
export function projectSpendWalkQuery(
  projectId: string,
  from: string,
  after: number,
  upTo: number,
  fromCreation = false,
) {
  return sql<SpendSumRow>`select ${spendSumSelect()}
  from usage_records not indexed
  where rowid > ${after} and rowid <= ${upTo} and project_id = ${projectId} and created_at >= ${from}
    ${fromCreation ? sql`and ${begunFrom(from, false)}` : sql``}`;
}

/** SQLite: the table's largest rowid, and the request id of that row and of the row at `at`. */
export function spendTopQuery(at: number) {
  return sql<{ top: number | null; top_request: string | null; anchor: string | null }>`select
    (select max(rowid) from usage_records) as top,
    (select request_id from usage_records where rowid = (select max(rowid) from usage_records)) as top_request,
    (select request_id from usage_records where rowid = ${at}) as anchor`;
}

/**
 * SQLite: where a slice of a project's rows that starts at `from` ends (exclusive), for a report
 * (rows before `to`) or a spend guard's full read (no `to`): the time of the project's row
 * `reportSliceRows` on from `from`, walked in the index on project and time; none when fewer are
 * left. `past`: the first time after `from` instead (`sliceEnd`).
 */
export function sliceEndQuery(
  db: Kysely<Database>,
  projectId: string,
  from: string,
  to: string | undefined,
  past = false,
) {
  return db
    .selectFrom("usage_records")
    .select("created_at")
    .where("project_id", "=", projectId)
    .where("created_at", past ? ">" : ">=", from)
    .$if(to !== undefined, (query) => query.where("created_at", "<", to as string))
    .orderBy("created_at")
    .limit(1)
    .offset(past ? 0 : reportSliceRows);
}

/**
 * Where a slice of a project's rows from `from` ends (`sliceEndQuery`): rows of one instant are
 * never split, so when the row a slice on stands at `from` itself (more than a slice of rows at one
 * instant: never seen, rows are stamped to the millisecond), the first time after it; none when
 * fewer than a slice are left.
 */
async function sliceEnd(
  db: Kysely<Database>,
  projectId: string,
  from: string,
  to?: string,
): Promise<string | undefined> {
  const end = (await sliceEndQuery(db, projectId, from, to).executeTakeFirst())?.created_at;
  if (end === undefined || end > from) return end;
  return (await sliceEndQuery(db, projectId, from, to, true).executeTakeFirst())?.created_at;
}

/**
 * SQLite: a slice of a project's full spend read: the known costs from `from` (included) to `to`
 * (excluded; none: no end) of the rows whose rowid is at most `upTo`, in the index on project and
 * time (`indexed by`: the rowid bound must not make the planner walk the table by rowid instead).
 */
export function spendSliceQuery(
  projectId: string,
  from: string,
  to: string | undefined,
  upTo: number,
  begun?: string,
) {
  return sql<SpendSumRow>`select ${spendSumSelect()}
  from usage_records indexed by usage_records_project_time
  where project_id = ${projectId} and created_at >= ${from}
    ${to === undefined ? sql`` : sql`and created_at < ${to}`} and rowid <= ${upTo}
    ${begun === undefined ? sql`` : sql`and ${begunFrom(begun, false)}`}`;
}

/**
 * A SQLite spend statement's answer: the known costs summed (cost-sums.ts), the largest, and the
 * calls of unknown cost.
 */
type SpendSumRow = CostSumColumns & { largest: number | null; unpriced: number | null };

/** The select list of a SQLite spend statement over `usage_records` (`SpendSumRow`). */
function spendSumSelect() {
  const costs = costSumColumns(false);
  return sql`${costs.cost_whole} as cost_whole, ${costs.cost_part} as cost_part,
    ${costs.cost_beyond} as cost_beyond, max(cost_usd) as largest, ${unpricedRequestsSum()} as unpriced`;
}

/**
 * Known costs added up, exactly (cost-sums.ts), and the largest cost of one row in USD: a figure
 * added up over many statements answers what one statement's sum does. Added up as doubles, each
 * walk past 2^53 billionths (some $9 million) lost a billionth or two, and the figure drifted
 * under a full read's.
 */
interface SpendSums {
  total: CostTotal;
  largestUsd: number;
  /** The calls of unknown cost (`countsAsUnpriced`). */
  unpricedCalls: number;
}

/** A figure a SQLite repository carries on: a project's spend since `from`, up to the last walk. */
interface CarriedSpend extends SpendSums {
  readonly from: string;
  readonly fromCreation: boolean;
}

/** Gives the event loop back: the requests in flight run before the next statement. */
const giveBackLoop = () => new Promise((resolve) => setImmediate(resolve));

/**
 * Spend reads on SQLite, whose statements run on the event loop: every request in flight waits for
 * each. A project's first read of a span (its month, or since its creation) sums its rows through
 * the index on project and time in slices of `reportSliceRows`, the loop given back between them: one
 * statement over 900,000 rows held it 350 to 500 ms (a slice: 2 to 13 ms). The figure is then
 * carried on: the rows written since are walked by rowid, in slices too, once for every figure
 * carried (a read walks those written since the last walk, whichever project's read that was).
 * Before, each project's read walked the rows written since its own last read, of every project:
 * with 100 capped projects each row was walked 100 times (64 to 92 ms of CPU on the loop every 5 s
 * at 1,000 rows a second; 24 to 34 ms now, most of it a statement a refresh, as there was before).
 *
 * SQLite gives a new row the largest rowid plus one, so the rows written since a walk are those
 * above the largest rowid it saw, whatever their time (a row written late, after an outage, stamped
 * earlier in the month, is one of them), and a batch's duplicate request id, not inserted, is none.
 * Should the row at that rowid be gone (deleted: the rowid may then be given again) or another row
 * hold it (a `VACUUM` may renumber the rows), every figure is let go, and read in full again.
 *
 * A full read sums the rows up to the largest rowid when it began: a row written during it, stamped
 * in a slice read already (a late row) or in one not read yet, is above that, and added once, when
 * the figure joins those carried, from there to where the last walk ended. Walks and figures joining
 * or going take turns; `spend_carried` lists the figures carried, for the walk's statement.
 */
function sqliteSpendReads(db: Kysely<Database>) {
  const owner = ++spendOwners;
  /** By project, the one read longest ago first. */
  const carried = new Map<string, CarriedSpend>();
  /** Where the last walk ended: the table's largest rowid then, and that row's request id. */
  let mark: { rowid: number; requestId: string | null } | undefined;
  let turns: Promise<unknown> = Promise.resolve();
  let created = false;

  /** Runs `task` once those before it are done: walks and figures joining or going, one at a time. */
  function inTurn<T>(task: () => Promise<T>): Promise<T> {
    const run = turns.then(async () => {
      if (!created) {
        await createSpendCarried.execute(db);
        created = true;
      }
      return task();
    });
    turns = run.catch(() => {});
    return run;
  }

  function add(sums: SpendSums, row: SpendSumRow | undefined) {
    if (row === undefined) return;
    sums.total = addCostTotals(sums.total, costTotalOf(row)) ?? noCost;
    sums.largestUsd = Math.max(sums.largestUsd, Number(row.largest ?? 0));
    sums.unpricedCalls += Number(row.unpriced ?? 0);
  }

  /** Lets every figure go (in a turn): the rows above the mark are not all written since. */
  async function letAllGo(): Promise<void> {
    await sql`delete from temp.spend_carried where owner = ${owner}`.execute(db);
    carried.clear();
  }

  /**
   * Adds the rows written since the last walk to every figure carried, up to the table's last row
   * (in a turn); answers that row's rowid. Nothing is added should a statement fail.
   */
  async function walk(): Promise<number> {
    if (mark === undefined || carried.size === 0) {
      const { rows } = await spendTopQuery(0).execute(db);
      mark = { rowid: Number(rows[0]?.top ?? 0), requestId: rows[0]?.top_request ?? null };
      return mark.rowid;
    }
    const added = new Map<string, SpendSums>();
    let last: { rowid: number; requestId: string | null } | undefined;
    for (let start = mark.rowid; last === undefined || start < last.rowid; ) {
      if (last !== undefined) await giveBackLoop();
      const end = last === undefined ? start + spendSliceRows : Math.min(start + spendSliceRows, last.rowid);
      const { rows } = await spendWalkQuery(owner, start, end).execute(db);
      for (const row of rows) {
        if (row.project_id === null) {
          if (last !== undefined) continue;
          if ((row.anchor ?? null) !== mark.requestId) {
            await letAllGo();
            mark = { rowid: Number(row.top ?? 0), requestId: row.top_request ?? null };
            return mark.rowid;
          }
          last = { rowid: Number(row.top ?? 0), requestId: row.top_request ?? null };
          continue;
        }
        const sums = added.get(row.project_id) ?? { total: noCost, largestUsd: 0, unpricedCalls: 0 };
        added.set(row.project_id, sums);
        add(sums, row);
      }
      if (last === undefined) throw new Error("The spend walk's statement answered no first row");
      start = end;
    }
    for (const [projectId, sums] of added) {
      const figure = carried.get(projectId);
      if (!figure) continue;
      figure.total = addCostTotals(figure.total, sums.total) ?? noCost;
      figure.largestUsd = Math.max(figure.largestUsd, sums.largestUsd);
      figure.unpricedCalls += sums.unpricedCalls;
    }
    mark = last;
    return mark.rowid;
  }

  function answer(projectId: string, figure: CarriedSpend): SpendSince {
    // Read last, let go last.
    carried.delete(projectId);
    carried.set(projectId, figure);
    return {
      totalUsd: usdOf(figure.total),
      largestUsd: figure.largestUsd,
      unpricedCalls: figure.unpricedCalls,
      next: { projectId, from: figure.from, fromCreation: figure.fromCreation },
    };
  }

  /** A project's first read of a span: in slices, up to the rowid it began at, then carried on. */
  async function fullRead(
    projectId: string,
    from: string,
    fromCreation: boolean,
  ): Promise<SpendSince | undefined> {
    const begun = (await spendTopQuery(0).execute(db)).rows[0];
    const upTo = Number(begun?.top ?? 0);
    const sums: SpendSums = { total: noCost, largestUsd: 0, unpricedCalls: 0 };
    const begunAt = fromCreation ? from : undefined;
    for (let start: string | undefined = from; start !== undefined; ) {
      if (start !== from) await giveBackLoop();
      const end = await sliceEnd(db, projectId, start);
      add(sums, (await spendSliceQuery(projectId, start, end, upTo, begunAt).execute(db)).rows[0]);
      start = end;
    }
    return inTurn(async () => {
      const walked = await walk();
      // The row it began at gone or replaced: rows written since may be among those it read, or not.
      const now = (await spendTopQuery(upTo).execute(db)).rows[0];
      if ((now?.anchor ?? null) !== (begun?.top_request ?? null) || walked < upTo) return undefined;
      for (let start = upTo; start < walked; ) {
        if (start !== upTo) await giveBackLoop();
        const end = Math.min(start + spendSliceRows, walked);
        add(
          sums,
          (await projectSpendWalkQuery(projectId, from, start, end, fromCreation).execute(db)).rows[0],
        );
        start = end;
      }
      await sql`insert into temp.spend_carried (owner, project_id, from_at, from_creation)
        values (${owner}, ${projectId}, ${from}, ${fromCreation ? 1 : 0})
        on conflict (owner, project_id) do update
        set from_at = excluded.from_at, from_creation = excluded.from_creation`.execute(db);
      const figure = { from, fromCreation, ...sums };
      const read = answer(projectId, figure);
      for (const [oldest] of carried) {
        if (carried.size <= spendFiguresCarried) break;
        await sql`delete from temp.spend_carried where owner = ${owner} and project_id = ${oldest}`.execute(
          db,
        );
        carried.delete(oldest);
      }
      return read;
    });
  }

  return async (projectId: string, from: string, after: SpendMark | undefined, fromCreation: boolean) => {
    if (
      after !== undefined &&
      after.projectId === projectId &&
      after.from === from &&
      (after.fromCreation ?? false) === fromCreation
    ) {
      const read = await inTurn(async () => {
        await walk();
        const figure = carried.get(projectId);
        return figure?.from === from && figure.fromCreation === fromCreation
          ? answer(projectId, figure)
          : undefined;
      });
      if (read) return read;
    }
    for (;;) {
      const read = await fullRead(projectId, from, fromCreation);
      if (read) return read;
    }
  };
}

/**
 * A project's usage report over a window, grouped (index on project, time): the first `limit`
 * groups after `after`, in the code-point order of the group, a null group (no model) last. Text is
 * compared as its UTF-8 bytes, the order of code points, on both engines: SQLite's default (BINARY)
 * collation, and PostgreSQL's "C" (its default is the database's, which may be any language's).
 * `compareGroups` orders the same way.
 */
export function reportQuery(
  reader: Kysely<Database>,
  { projectId, from, to, groupBy, limit, after, begunFrom: begun }: UsageQuery,
  postgres: boolean,
) {
  // A row at `from` or after whose call is at most this long began after `begun`: not tested.
  const longest = begun === undefined ? 0 : Math.max(0, Date.parse(from) - Date.parse(begun));
  const column =
    groupBy === "day"
      ? sql<string>`substr(created_at, 1, 10)`
      : groupBy === "model"
        ? sql<string>`model`
        : sql<string>`endpoint`;
  const group = postgres ? sql<string>`${column} collate "C"` : column;
  return (
    reader
      .selectFrom("usage_records")
      // Token sums in floating point on SQLite (`* 1.0`), whose integer sum() fails with
      // "integer overflow" past 2^63 where PostgreSQL's (numeric) answers; a provider may report
      // any safe integer. On PostgreSQL `* 1.0` is numeric: exact, as before.
      .select([
        column.as("group_key"),
        // A row stands for `requests` requests (1, more for coalesced refusals: decision 0015).
        sql<number>`sum(requests)`.as("requests"),
        sql<number>`sum(case when outcome = 'ok' then 0 else requests end)`.as("errors"),
        sql<number>`coalesce(sum(input_tokens * 1.0), 0)`.as("input_tokens"),
        sql<number>`coalesce(sum(output_tokens * 1.0), 0)`.as("output_tokens"),
        sql<number>`coalesce(sum(cached_tokens * 1.0), 0)`.as("cached_tokens"),
        sql<number>`coalesce(sum(reasoning_tokens * 1.0), 0)`.as("reasoning_tokens"),
        // Costs are recorded to the billionth: summed exactly as whole billionths (cost-sums.ts), not
        // as dollars, whose float sum drifts with the row count on PostgreSQL (20,000 calls of $0.10
        // summed to 1999.9999999992765), nor as billionths in doubles, which drift past 2^53.
        ...costSumSelection(postgres),
        // Calls whose cost is unknown: a refusal or an error costs nothing, so only rows whose call
        // went through (ok, or cut short) without a price count, and failed calls that report
        // tokens, which the provider billed (a structured call whose repair failed too): the calls
        // the spend cap counts at an estimate (`countsAsUnpriced`).
        unpricedRequestsSum().as("unpriced"),
      ])
      .where("project_id", "=", projectId)
      .where("created_at", ">=", from)
      .where("created_at", "<", to)
      .$if(begun !== undefined, (query) =>
        query.where(
          longest > 0
            ? sql<boolean>`(latency_ms <= ${longest} or ${begunFrom(begun as string, postgres)})`
            : begunFrom(begun as string, postgres),
        ),
      )
      // A null group (no model) comes after every other: after any of them.
      .$if(after !== undefined, (query) =>
        query.where(sql<boolean>`(${group} > ${after} or ${column} is null)`),
      )
      .groupBy(column)
      .orderBy(sql`${group} nulls last`)
      .limit(limit)
  );
}

type ReportRow = Awaited<ReturnType<ReturnType<typeof reportQuery>["execute"]>>[number];

/** A group's sums: a statement's, or several slices' added up, with the costs' total (cost-sums.ts). */
type ReportSums = Omit<ReportRow, keyof CostSumColumns> & { cost: CostTotal | null };

/** A statement's groups as `ReportSums`. */
function toSums(rows: ReportRow[]): ReportSums[] {
  return rows.map(({ cost_whole, cost_part, cost_beyond, ...sums }) => ({
    ...sums,
    cost: costTotalOf({ cost_whole, cost_part, cost_beyond }),
  }));
}

/**
 * A report on SQLite, whose statements run on the event loop: one statement over all of a
 * project's rows in the window held every request in flight for as long as it took (1.0 to 1.3 s
 * at 900,000 rows, any grouping; a busy month is tens of millions). The window is cut into slices
 * of `reportSliceRows` rows at most (at an instant, so each row is in one slice), each summed by
 * the report's own query, with the event loop given back between them; the slices' sums add up
 * exactly (costs are whole billionths, added up as BigInt: cost-sums.ts). Rows at one instant are
 * never split: more than a slice of them (never seen: rows are stamped to the millisecond) make a
 * larger slice.
 *
 * Each slice answers its first `limit` groups: a group among the report's first `limit` is among
 * any slice's. The groups summed are kept to those that can still be among the report's first
 * `limit` (`boundedGroups`), so neither the statements' answers nor the sums held grow with the
 * number of groups, which the project's clients choose (a made-up model name each call).
 */
async function slicedReport(reader: Kysely<Database>, query: UsageQuery): Promise<ReportSums[]> {
  const groups = boundedGroups(query.limit);
  let from = query.from;
  while (from < query.to) {
    if (from !== query.from) await new Promise((resolve) => setImmediate(resolve));
    const end = (await sliceEnd(reader, query.projectId, from, query.to)) ?? query.to;
    for (const row of toSums(await reportQuery(reader, { ...query, from, to: end }, false).execute())) {
      const sums = groups.get(row.group_key);
      if (!sums) {
        groups.add(row);
        continue;
      }
      sums.requests = Number(sums.requests) + Number(row.requests);
      sums.errors = Number(sums.errors) + Number(row.errors);
      sums.input_tokens = Number(sums.input_tokens) + Number(row.input_tokens);
      sums.output_tokens = Number(sums.output_tokens) + Number(row.output_tokens);
      sums.cached_tokens = Number(sums.cached_tokens) + Number(row.cached_tokens);
      sums.reasoning_tokens = Number(sums.reasoning_tokens) + Number(row.reasoning_tokens);
      sums.cost = addCostTotals(sums.cost, row.cost);
      sums.unpriced = Number(sums.unpriced) + Number(row.unpriced);
    }
    from = end;
  }
  return groups.first();
}

/**
 * Sums by group, keeping only the groups that may be among the first `limit` in the report's order
 * (`compareGroups`): once more than twice as many are held, those after the first `limit` are
 * dropped. A group dropped has `limit` groups before it held, which stay held (a group is dropped
 * only with `limit` others before it), so it is not among the first `limit` and, added again from a
 * later slice with part of its sums, is dropped again by the end; a group that is among them is
 * never dropped, so its sums are whole. Half the groups held go at a time, so a group costs a few
 * comparisons.
 */
function boundedGroups(limit: number) {
  const groups = new Map<string | null, ReportSums>();
  const keepFirst = () => {
    const kept = [...groups.values()].sort((left, right) => compareGroups(left.group_key, right.group_key));
    for (const sums of kept.slice(limit)) groups.delete(sums.group_key);
    return kept.slice(0, limit);
  };
  return {
    get: (group: string | null) => groups.get(group),
    add(row: ReportSums) {
      groups.set(row.group_key, { ...row });
      if (groups.size > 2 * limit) keepFirst();
    },
    first: keepFirst,
  };
}

/**
 * One batch of the retention's deletes: the oldest `limit` rows before `before` (index on time,
 * 0006). Ordered by time so the planner walks that index rather than the table, whose oldest rows
 * sit behind the dead ones earlier batches left. On PostgreSQL the rows are locked `skip locked`:
 * an instance pruning at the same time as another deletes other rows instead of waiting for the
 * other's batch (both then delete what is left; deleting a row twice is never attempted). SQLite
 * has no row locks and one writer: the statement is short, and so is its write lock. (`postgres`:
 * the engine, which the repository knows from its SQLite handle; the production bundle takes only
 * the Kysely values scripts/build.js lists, no adapter class to test against.)
 */
export function pruneQuery(db: Kysely<Database>, before: string, limit: number, postgres: boolean) {
  const oldest = db
    .selectFrom("usage_records")
    .select("request_id")
    .where("created_at", "<", before)
    .orderBy("created_at")
    .limit(limit);
  return db
    .deleteFrom("usage_records")
    .where("request_id", "in", postgres ? oldest.forUpdate().skipLocked() : oldest);
}

/**
 * How long a usage batch waits for another process's write lock on the file, off the event loop
 * (tried again after timers, `waitingOutLocks`), not the 5 s every other statement waits: a batch
 * that finds the file locked fails as an outage (SQLITE_BUSY), its rows stay queued and are written
 * after the recorder's back-off, which logs and counts the outage.
 */
const usageBusyTimeoutMs = 50;

function sqliteBatchWriter(
  db: Kysely<Database>,
  sqlite: BetterSqlite3.Database,
): (rows: readonly UsageRecord[]) => Promise<void> {
  const write = sqliteTransaction(sqlite);
  return (rows) =>
    waitingOutLocks(async () => {
      // A Kysely transaction (an admin write) holds the one connection across its awaits: rows
      // written in between would join it as a savepoint and go if it rolled back, after being
      // reported written. They wait for its end through Kysely's own connection lock instead. (Asked
      // at each try: one may have begun while this one waited for another process's lock.)
      if (sqlite.inTransaction) await db.connection().execute(async () => write(rows));
      else write(rows);
    }, usageBusyTimeoutMs);
}

/**
 * Rows an INSERT of a usage batch holds: each statement run pays SQLite's setup (the transaction
 * check, a cursor on the table and each index, the reset) and better-sqlite3's call and result
 * object once, so ten rows a statement take ~8,000 fewer instructions a row than one (callgrind;
 * statements of 5 to 100 rows measured, 10 to 25 the cheapest). A batch's last rows short of ten
 * go one a statement.
 */
const rowsPerInsert = 10;

/**
 * Parameters are bound by position, in the order of `columns`: binding by name makes
 * better-sqlite3 look up every column on the row object from C++, which cost about 3 µs of the
 * 8 to 11 µs a row takes (docs/decisions/0005). The contract suite checks every column round-trips.
 */
function sqliteTransaction(sqlite: BetterSqlite3.Database): (rows: readonly UsageRecord[]) => void {
  const insertOf = (rowCount: number) =>
    sqlite.prepare(
      `insert into usage_records (${columns.join(", ")}) values ${Array.from(
        { length: rowCount },
        () => `(${columns.map(() => "?").join(", ")})`,
      ).join(", ")} on conflict (request_id) do nothing`,
    );
  const insertMany = insertOf(rowsPerInsert);
  const insertOne = insertOf(1);
  const many: unknown[] = new Array(rowsPerInsert * columns.length);
  const one: unknown[] = new Array(columns.length);
  return sqlite.transaction((rows: readonly UsageRecord[]) => {
    let next = 0;
    for (; next + rowsPerInsert <= rows.length; next += rowsPerInsert) {
      for (let row = 0; row < rowsPerInsert; row++)
        putColumns(many, row * columns.length, rows[next + row] as UsageRecord);
      insertMany.run(...many);
    }
    for (; next < rows.length; next++) {
      putColumns(one, 0, rows[next] as UsageRecord);
      insertOne.run(...one);
    }
  });
}

/** Writes `row`'s values into `values` from `at`, in the order of `columns`. */
function putColumns(values: unknown[], at: number, row: UsageRecord): void {
  values[at] = row.request_id;
  values[at + 1] = row.project_id;
  values[at + 2] = row.key_id;
  values[at + 3] = row.endpoint;
  values[at + 4] = row.provider;
  values[at + 5] = row.model;
  values[at + 6] = row.status;
  values[at + 7] = row.error_code;
  values[at + 8] = row.input_tokens;
  values[at + 9] = row.output_tokens;
  values[at + 10] = row.cached_tokens;
  values[at + 11] = row.reasoning_tokens;
  values[at + 12] = row.cost_usd;
  values[at + 13] = row.latency_ms;
  values[at + 14] = row.ttfb_ms;
  values[at + 15] = row.streamed;
  values[at + 16] = row.outcome;
  values[at + 17] = row.auth_method;
  values[at + 18] = row.client_ip;
  values[at + 19] = row.created_at;
  values[at + 20] = row.requests;
  values[at + 21] = row.provider_answered ?? null;
}

/** PostgreSQL's query_canceled: for a report, its statement timeout (or an operator cancelling it). */
const queryCanceled = "57014";

/** A report the database gave up on: the range is too large for it now, which a retry right away would not change. */
function reportCancelled(cause: unknown): GatewayError {
  return new GatewayError(
    "SERVICE_UNAVAILABLE",
    "The usage report took too long and the database cancelled it; ask for a shorter range (from, to) or retry later",
    { cause, headers: { "retry-after": "30" }, details: { retryable: true } },
  );
}

/**
 * The report's order of groups, the statements' (`reportQuery`): code points (the order of the
 * UTF-8 bytes), a null group last. It is code-unit order, JavaScript's `<`, but for a character
 * past U+FFFF, whose surrogates (U+D800 to U+DFFF) come before U+E000 to U+FFFF as code units.
 */
function compareGroups(left: string | null, right: string | null): number {
  if (left === right) return 0;
  if (left === null) return 1;
  if (right === null) return -1;
  const length = Math.min(left.length, right.length);
  for (let at = 0; at < length; at++) {
    const one = left.charCodeAt(at);
    const other = right.charCodeAt(at);
    if (one === other) continue;
    if (one < 0xd800 || other < 0xd800) return one - other;
    return codePointRank(one) - codePointRank(other);
  }
  return left.length - right.length;
}

/** A code unit from U+D800 on, ranked as the code points it stands for: surrogates after U+FFFF. */
function codePointRank(unit: number): number {
  return unit >= 0xe000 ? unit - 0x800 : unit + 0x2000;
}
