import type { RawBuilder } from "kysely";
import { sql } from "./kysely.js";

/**
 * Known costs summed exactly, in whole billionths of a dollar (the precision a row's cost is
 * recorded at), on both engines (docs/decisions/0045). A double holds every whole number only up to
 * 2^53, some 9 million USD in billionths: summed as doubles, PostgreSQL's sum() and the additions of
 * SQLite's slices rounded off a billionth or more at each step past it. Each row's billionths are
 * summed as integers instead, as two columns that neither engine's integer sum can overflow: the
 * whole dollars and the billionths under a dollar, each under 1e9 a row. Both are read as text
 * (PostgreSQL's sum of bigint is numeric, past what a JavaScript number holds; SQLite's integer past
 * 2^53 would come back rounded) and added up as BigInt.
 *
 * A row's cost of `beyondUsd` (1e9 USD, the largest monthly spend cap) or more, which no call
 * costs (a provider reporting absurd token counts), cannot be held as billionths in a 64-bit
 * integer: such costs are summed apart as doubles, and the figure with them is a double too.
 */
const beyondUsd = 1e9;

/** The columns a statement sums a group's known costs into (`costSumColumns`). */
export interface CostSumColumns {
  /** Whole dollars of the rows' costs in billionths (under `beyondUsd`), summed; null: no such row. */
  cost_whole: string | null;
  /** The billionths under a dollar of the same rows, summed. */
  cost_part: string | null;
  /** The costs of `beyondUsd` or more, summed as doubles; null: no such row. */
  cost_beyond: number | null;
}

/**
 * A row's cost in whole billionths, a double holding a whole number (converted to a 64-bit integer
 * exactly), rounded alike on both engines: a half away from zero, as SQLite's round() rounds.
 * PostgreSQL's round(double precision) takes a half to the even neighbour (2.5 billionths to 2, where
 * SQLite answers 3), so there SQLite's own steps are written out: past 2^52 a double is whole and is
 * kept, below it half is added to its magnitude and the fraction dropped, in doubles, as SQLite does.
 */
function billionthsOf(cost: RawBuilder<unknown>, postgres: boolean) {
  const scaled = sql`(${cost} * 1000000000)`;
  if (!postgres) return sql`round(${scaled})`;
  return sql`case when abs(${scaled}) > 4503599627370496 then ${scaled}
    when ${scaled} < 0 then -floor(0.5 - ${scaled}) else floor(${scaled} + 0.5) end`;
}

/**
 * The expressions of `CostSumColumns`, over the cost column `cost` (`cost_usd` unless given), for
 * PostgreSQL (`postgres`) or SQLite.
 */
export function costSumColumns(postgres: boolean, cost: RawBuilder<unknown> = sql.ref("cost_usd")) {
  const billionths = sql`cast(${billionthsOf(cost, postgres)} as bigint)`;
  const held = sql`abs(${cost}) < ${sql.lit(beyondUsd)}`;
  return {
    cost_whole: sql<string | null>`cast(sum(case when ${held} then ${billionths} / 1000000000 end) as text)`,
    cost_part: sql<string | null>`cast(sum(case when ${held} then ${billionths} % 1000000000 end) as text)`,
    cost_beyond: sql<number | null>`sum(case when abs(${cost}) >= ${sql.lit(beyondUsd)} then ${cost} end)`,
  };
}

/** `costSumColumns` over `cost_usd` as a query builder's select list, each under its name. */
export function costSumSelection(postgres: boolean) {
  const costs = costSumColumns(postgres);
  return [
    costs.cost_whole.as("cost_whole"),
    costs.cost_part.as("cost_part"),
    costs.cost_beyond.as("cost_beyond"),
  ] as const;
}

/** Known costs added up: whole billionths, exact, and the costs past `beyondUsd` (0 when none). */
export interface CostTotal {
  billionths: bigint;
  beyondUsd: number;
}

export const noCost: CostTotal = { billionths: 0n, beyondUsd: 0 };

/** The total a statement's `CostSumColumns` hold; null when no row of them had a known cost. */
export function costTotalOf(row: CostSumColumns): CostTotal | null {
  if (row.cost_whole === null && row.cost_beyond === null) return null;
  return {
    billionths: BigInt(row.cost_whole ?? 0) * billion + BigInt(row.cost_part ?? 0),
    beyondUsd: Number(row.cost_beyond ?? 0),
  };
}

/** Two totals added up; null when neither had a known cost. */
export function addCostTotals(left: CostTotal | null, right: CostTotal | null): CostTotal | null {
  if (left === null || right === null) return left ?? right;
  return { billionths: left.billionths + right.billionths, beyondUsd: left.beyondUsd + right.beyondUsd };
}

/**
 * A total in USD: the double nearest its exact decimal, rounded once (the costs past `beyondUsd`
 * added to it). Below 2^53 billionths it is the number `billionths / 1e9` is, as before; a double
 * holds every billionth up to 2^23 USD (8,388,608), and the nearest one past it.
 */
export function usdOf(total: CostTotal): number {
  const { billionths } = total;
  const magnitude = billionths < 0n ? -billionths : billionths;
  const fraction = (magnitude % billion).toString().padStart(9, "0");
  const usd = Number(`${billionths < 0n ? "-" : ""}${magnitude / billion}.${fraction}`);
  return total.beyondUsd === 0 ? usd : usd + total.beyondUsd;
}

const billion = 1_000_000_000n;
