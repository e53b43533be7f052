import type { LimitsInScript, RateLimitDecision } from "../rate-limit/rate-limiter.js";
import type { ScriptPart } from "../redis/redis-script.js";
import { type ReloadWait, withinReloadWait, withinRequestWait } from "../storage/database-unavailable.js";
import {
  countsAsUnpriced,
  type SpendMark,
  type UsageRecord,
  type UsageRepository,
} from "../storage/usage-repository.js";
import type { InFlightFigures, SharedCallsInFlight, SharedPlace } from "./shared-calls-in-flight.js";
import { defaultUnpricedCallUsd, unpricedCallEstimate } from "./unpriced-call.js";

/** A place held under the cap (`holdWithLimits`), and the limits' decisions when Redis made them with it. */
export interface HeldWithLimits {
  release: () => void;
  decisions?: RateLimitDecision[];
  /** Counts the call at its price, known before it runs (`HeldPlace.price`); none when it holds no place. */
  price?: HeldPlace["price"];
}

/**
 * What `HeldPlace.price` decided: the call counted at its price (`counted`), or not, its place kept
 * at the largest call's figure, as the caller refuses it: `over-cap` when the month's spend and its
 * price alone pass the cap, `in-flight` when only the calls in flight with them do.
 */
export type KnownPriceVerdict = "counted" | "over-cap" | "in-flight";

/** A place among a project's calls in flight on this instance (`placeUnderCap`). */
interface HeldPlace {
  /** Gives the place back (once; and its place in Redis, if it holds one). */
  release: () => void;
  /**
   * The call's price, known before it runs (an image call's n images at the pricing table's price):
   * the call counts in flight at the larger of it and the largest call's figure (`inFlightCallUsd`),
   * if the month's spend, the other calls in flight and it stay within the cap. A place in Redis is
   * priced there, in one script, for every instance (a promise; this instance's count decides while
   * Redis cannot); one on this instance alone, at once.
   */
  price: (costUsd: number) => KnownPriceVerdict | Promise<KnownPriceVerdict>;
}

/**
 * What a figure may hold that this instance alone knows and still be let go (a billionth of a
 * dollar, the precision a row's cost is stored at): its costs summed in another order as they are
 * written may differ from their sum as recorded in the last bits.
 */
const negligibleUsd = 1e-9;

/** A project's calls in flight on this instance under its cap (`MonthSpend.flight`). */
interface CallsInFlight {
  inFlight: number;
  /**
   * What the calls of `inFlight` whose price was known before they ran (`HeldPlace.price`) cost
   * above the figure each counts at (`inFlightCallUsd`, when it was priced), summed: they count at
   * their price, the others at the figure.
   */
  inFlightAbove: number;
  /**
   * The part of `inFlightAbove` of calls priced in Redis too (`SharedPlace.price`): the scripts
   * count it from there, for every instance, so it is left out of the spend they are given.
   */
  sharedAbove: number;
}

interface MonthSpend {
  /** The project's id, the key the figure is held under. */
  projectId: string;
  /** The month's first instant, ISO. */
  month: string;
  /**
   * What the database read asks from: the month's first instant, or the project's creation when
   * later (a project deleted and created again under its id does not inherit the old one's spend).
   */
  since: string;
  /** `YYYY-MM`, to match a usage row's `created_at`. */
  prefix: string;
  /** The month's bounds, epoch ms (end exclusive). */
  from: number;
  until: number;
  /** When `base` was read; -Infinity until the first read of the month succeeds. */
  readAt: number;
  /**
   * Whether `base` is a figure to judge on while a read is due or fails: one read from the database,
   * or the month's first instant's 0, when the month turned on a figure of the project (below).
   */
  known: boolean;
  /** The month's spend in the database, as last read. */
  base: number;
  /** The largest cost of one row of the month in the database, as last read with `base`. */
  largestRead: number;
  /** The month's calls of unknown cost in the database (`countsAsUnpriced`), as last read with `base`. */
  unpricedRead: number;
  /**
   * The figure the database's read of `base` left (SQLite): the next read adds only the rows
   * written since, rather than going over the month's rows again on the event loop. None before a
   * first read of `since`.
   */
  mark?: SpendMark | undefined;
  /**
   * Costs recorded on this instance that `base` may not hold: their rows were not yet written when
   * that read began (queued in the usage recorder, held there through a database outage, or
   * recorded since).
   */
  unread: number;
  /** The part of `unread` whose rows have been written since: the next read to begin holds them. */
  written: number;
  /**
   * Calls of unknown cost recorded on this instance (`addUnpriced`) that `unpricedRead` may not
   * hold, as `unread` holds costs; and the part of them whose rows have been written since.
   */
  unpricedUnread: number;
  unpricedWritten: number;
  /**
   * The time of the latest cost in `unread` or call in `unpricedUnread` (epoch ms; -Infinity when
   * none was added).
   */
  latestUnread: number;
  /**
   * Costs of rows stamped before this (epoch ms) are a project's deleted under the id, let go of
   * here when the project created again was learnt of: neither added nor, once written, taken off.
   */
  forgottenBefore: number;
  /**
   * The project's creation (epoch ms) when the month is read from it (`since`), -Infinity otherwise:
   * a call begun before it was a project's deleted under the id (`leftOutAsBegunBefore`), whatever its row's
   * time, and counts neither here nor in the read (`spendSince`'s `fromCreation`).
   */
  creationMs: number;
  /**
   * The request ids of the rows of calls begun before `creationMs` that `add` and `addUnpriced` left
   * out: `written` leaves out those rows, and those alone. A row of such a call counted here before
   * the creation was learnt of (its cost added then) is taken off once written, as any: left out by
   * its time, as every row begun before the creation was once one of them had been seen, its cost
   * stayed counted against the new project for the rest of the month. The figure stays while any is
   * not written yet: a figure started afresh would take its row, once written, off costs it never
   * counted (the month read below the database's), as a cost not yet written keeps it.
   */
  begunBeforeLeftOut: Set<string>;
  /**
   * Calls admitted on this instance under the cap whose cost is not known yet (`hold`), those that
   * hold a place in Redis too: what this instance decides on while Redis cannot. A project created
   * again under the id starts a count of its own: the deleted one's calls still in flight give back
   * their places to the count they took them in.
   */
  flight: CallsInFlight;
  /**
   * The places held in every count (`flight`, and those of a project deleted under the id still in
   * flight): the figure stays while any is, so that such a call, when it ends, is known as the
   * deleted project's (`creationMs`), not counted in a figure started afresh.
   */
  places: number;
  /**
   * The largest cost of one call this instance recorded for the project this month (`add`): its rows
   * may not be written, nor read back in `largestRead`, yet.
   */
  largestCall: number;
  /** The time of the row `largestCall` is the cost of (epoch ms; -Infinity when none was added). */
  largestCallAt: number;
  /** The read in flight, shared by every request that finds the figure stale meanwhile. */
  loading?: Promise<void> | undefined;
  /** The same read as the requests that have a figure wait for it: `reloadWaitMs` at most, then none. */
  waited?: Promise<void> | undefined;
  /** Whether the figure is in the list of those that may go, and its neighbours there. */
  mayGo: boolean;
  older?: MonthSpend | undefined;
  newer?: MonthSpend | undefined;
}

/**
 * Month-to-date spend per project, for the optional monthly cap: the known costs, and each call of
 * unknown cost at an estimate (`unpricedCallEstimate`, decision 0057). Reads the database at most once
 * per `refreshMs` per project and adds the costs recorded on this instance that the read could not
 * see, so the hot path does not wait on the database. A cost stays counted here until a read that
 * began after its row was written (`written`, which the usage recorder reports), so rows still
 * queued (after an outage, say) are never left out, nor counted twice once written and read back.
 * Several instances each see the others' spend within `refreshMs` of its rows being written. On
 * SQLite a project's reads after its first of the month add only the rows written since, walked once
 * for all the projects read (`SpendMark`): a busy month is not gone over again on the event loop
 * every `refreshMs`, nor the rows written since once for each capped project.
 */
export function createSpendGuard(deps: SpendGuardDeps & { shared?: undefined }): SpendGuardHere;
export function createSpendGuard(deps: SpendGuardDeps): SpendGuard;
export function createSpendGuard(deps: SpendGuardDeps): SpendGuard {
  return spendGuard(deps);
}

export interface SpendGuardDeps {
  usage: UsageRepository;
  now: () => Date;
  refreshMs?: number;
  /** Projects whose figures are held at most, but for those holding a cost not yet written (10,000). */
  maxProjects?: number;
  /**
   * What a call of unknown cost counts at, at least (SLUICE_UNPRICED_CALL_USD): the estimate when
   * the month holds no known cost of one call as large (`unpricedCallEstimate`); and what each call
   * in flight counts at while the month holds no known cost at all (`hold`).
   */
  unpricedCallUsd?: number;
  /**
   * The calls in flight of every instance sharing Redis (REDIS_URL): `hold` counts there, and on
   * this instance alone while Redis cannot answer. Without it, `hold` counts this instance's calls.
   */
  shared?: SharedCallsInFlight | undefined;
}

export type SpendGuard = ReturnType<typeof spendGuard>;

/** A spend guard without `shared`: `hold` decides at once. */
export type SpendGuardHere = Omit<SpendGuard, "hold" | "holdWithLimits"> & {
  hold(...args: Parameters<SpendGuard["hold"]>): (() => void) | undefined;
  holdWithLimits(...args: Parameters<SpendGuard["holdWithLimits"]>): HeldWithLimits | undefined;
};

function spendGuard(deps: SpendGuardDeps) {
  const refreshMs = deps.refreshMs ?? 5000;
  const maxProjects = deps.maxProjects ?? 10_000;
  const unpricedCallUsd = deps.unpricedCallUsd ?? defaultUnpricedCallUsd;
  const cache = new Map<string, MonthSpend>();
  /**
   * The held figures that hold nothing this instance alone knows (no read in flight, no call in
   * flight, no cost but those whose rows are written, which a read that begins now sees, and no
   * row left out as begun before the creation but written), the longest so first. They are
   * linked through themselves, so that making room, and listing a figure or taking it off as its
   * costs and reads come and go, costs the same however many are held: through an outage none may
   * go, and each new project must not look over all of them again to find that out.
   */
  const mayGo: { oldest?: MonthSpend | undefined; newest?: MonthSpend | undefined } = {};

  /**
   * Lists the figure among those that may go, or takes it off, after what it holds changed (or it
   * was replaced in the cache).
   */
  function relist(entry: MonthSpend): void {
    const may =
      cache.get(entry.projectId) === entry &&
      entry.loading === undefined &&
      entry.places === 0 &&
      entry.begunBeforeLeftOut.size === 0 &&
      Math.abs(entry.unread - entry.written) < negligibleUsd &&
      entry.unpricedUnread === entry.unpricedWritten;
    if (may === entry.mayGo) return;
    entry.mayGo = may;
    if (may) {
      entry.older = mayGo.newest;
      if (mayGo.newest) mayGo.newest.newer = entry;
      else mayGo.oldest = entry;
      mayGo.newest = entry;
      return;
    }
    if (entry.older) entry.older.newer = entry.newer;
    else mayGo.oldest = entry.newer;
    if (entry.newer) entry.newer.older = entry.older;
    else mayGo.newest = entry.older;
    entry.older = undefined;
    entry.newer = undefined;
  }

  /**
   * Lets go of the figures that may go, the longest so first, until the cache has room: read again,
   * they cost one database read, which holds their costs. Figures with unwritten costs or calls in
   * flight stay, however many.
   */
  function makeRoom(): void {
    while (cache.size >= maxProjects && mayGo.oldest) {
      const oldest = mayGo.oldest;
      cache.delete(oldest.projectId);
      relist(oldest);
    }
  }

  /**
   * The project's figures for the month of `at`, started afresh when the month changed, or when
   * `createdAt` says the project is another than the one they were read for (deleted and created
   * again under its id): a later creation only, never an earlier one (an old record's).
   */
  function monthOf(projectId: string, at: Date, createdAt?: string): MonthSpend {
    const time = at.getTime();
    let entry = cache.get(projectId);
    if (!entry || time < entry.from || time >= entry.until) {
      const from = Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1);
      const month = new Date(from).toISOString();
      const replaced = entry;
      // A month's spend is 0 at its first instant: a project this instance held a figure for when the
      // month turned has one for the new month too (0, and the costs recorded here since), read at
      // once as a stale figure is, so an outage across the turn serves it as one within a month does.
      // Before, every call from the turn got 503 (each waiting for the query timeout while the
      // database hung), though the same outage a minute earlier was served.
      const known = replaced?.known === true && from >= replaced.until;
      entry = {
        projectId,
        month,
        since: month,
        prefix: month.slice(0, 7),
        from,
        until: Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1),
        readAt: Number.NEGATIVE_INFINITY,
        known,
        base: 0,
        largestRead: 0,
        unpricedRead: 0,
        unread: 0,
        written: 0,
        unpricedUnread: 0,
        unpricedWritten: 0,
        latestUnread: Number.NEGATIVE_INFINITY,
        forgottenBefore: Number.NEGATIVE_INFINITY,
        creationMs: Number.NEGATIVE_INFINITY,
        begunBeforeLeftOut: new Set(),
        flight: { inFlight: 0, inFlightAbove: 0, sharedAbove: 0 },
        places: 0,
        largestCall: 0,
        largestCallAt: Number.NEGATIVE_INFINITY,
        mayGo: false,
      };
      if (!replaced) makeRoom();
      cache.set(projectId, entry);
      if (replaced) relist(replaced);
      relist(entry);
    }
    const since = createdAt !== undefined && createdAt > entry.month ? createdAt : entry.month;
    // A creation before the one the figure is read from is a project's deleted under the id, named
    // by a request that read its record before the new one was created: the figure stays the new
    // project's (read again from the month, the next request of the new project started its calls
    // in flight afresh, its own left out of the count).
    if (createdAt !== undefined && since !== entry.since && !(Date.parse(since) < entry.creationMs)) {
      // Another project under the id (or its creation first learnt): the month is read again from
      // there. Costs recorded here and not yet written stay counted until written, but for those
      // all stamped before the creation: a project deleted under the id left them (its last calls,
      // their rows still queued), and the new one counts only the rows from its creation on
      // (docs/api.md). Before, they refused its first calls until written and read again. When its
      // own costs are among them too, they all stay counted (the times of each are not held).
      entry.since = since;
      entry.readAt = Number.NEGATIVE_INFINITY;
      entry.known = false;
      entry.base = 0;
      entry.largestRead = 0;
      entry.unpricedRead = 0;
      entry.mark = undefined;
      const sinceMs = Date.parse(since);
      // Calls begun before a later creation are the deleted project's: their places in flight are
      // not the new one's (they stay in the count they were taken in until they end), nor their
      // costs, though their rows are stamped after it when they end.
      const previous = entry.creationMs;
      entry.creationMs = since === entry.month ? Number.NEGATIVE_INFINITY : sinceMs;
      if (entry.creationMs > previous) entry.flight = { inFlight: 0, inFlightAbove: 0, sharedAbove: 0 };
      if (entry.latestUnread < sinceMs) {
        entry.forgottenBefore = sinceMs;
        entry.unread = 0;
        entry.written = 0;
        entry.unpricedUnread = 0;
        entry.unpricedWritten = 0;
        relist(entry);
      }
      // A largest call stamped before the creation was the deleted project's, whether or not the new
      // one recorded costs here since (calls made before its cap was set): kept, it counted the new
      // project's calls in flight and calls of unknown cost at it for the rest of the month, where
      // a project with no known cost counts them at the floor. One of the new project's own stays.
      if (entry.largestCallAt < sinceMs) {
        entry.largestCall = 0;
        entry.largestCallAt = Number.NEGATIVE_INFINITY;
      }
    }
    return entry;
  }

  /**
   * Rows written before the read begins are in what it returns; the others stay counted here. A row
   * reported written while the read ran may be in it or not (its commit and the read's snapshot
   * raced), and counted here too it would be counted twice: then the figure is read again, up to
   * twice more, by a read that begins after the report. Still racing, the higher figure stands until
   * the next read.
   */
  async function refresh(projectId: string, entry: MonthSpend): Promise<void> {
    try {
      for (let attempt = 0; ; attempt++) {
        const writtenBefore = entry.written;
        const unpricedWrittenBefore = entry.unpricedWritten;
        const since = entry.since;
        const read = await deps.usage.spendSince(projectId, since, entry.mark, since !== entry.month);
        // A project created again under the id meanwhile: this figure is the old one's; read again.
        if (entry.since !== since) continue;
        if (
          (entry.written !== writtenBefore || entry.unpricedWritten !== unpricedWrittenBefore) &&
          attempt < 2
        ) {
          // Read again from where this read ended (SQLite carries the figure on: the rows written
          // since are added), not over the whole month again.
          entry.mark = read.next;
          continue;
        }
        entry.base = read.totalUsd;
        entry.largestRead = read.largestUsd;
        entry.unpricedRead = read.unpricedCalls;
        entry.mark = read.next;
        entry.unread -= writtenBefore;
        entry.written -= writtenBefore;
        entry.unpricedUnread -= unpricedWrittenBefore;
        entry.unpricedWritten -= unpricedWrittenBefore;
        entry.readAt = deps.now().getTime();
        entry.known = true;
        return;
      }
    } catch (error) {
      // The figure it had stands for another refresh period before the next try, as if just read.
      if (entry.known) entry.readAt = deps.now().getTime();
      throw error;
    } finally {
      entry.loading = undefined;
      entry.waited = undefined;
      relist(entry);
    }
  }

  /**
   * What the cap counts one call in flight at: the largest known cost of one call of the project
   * this month, or, while the month holds none (0), `unpricedCallUsd`: before, the month's first
   * calls counted for nothing, and any number sent at once ran (decision 0057, its amendment). Once
   * a cost is known it alone counts, however small, so a project of cheap calls is not held back
   * by the floor.
   */
  function inFlightCallUsd(entry: MonthSpend): number {
    const largest = largestKnown(entry);
    return largest > 0 ? largest : unpricedCallUsd;
  }

  /**
   * The month's spend as the cap counts it, from what the figure holds now: the known costs, and
   * each call of unknown cost at `unpricedCallEstimate`.
   */
  function spentOf(entry: MonthSpend): number {
    const unpriced = entry.unpricedRead + entry.unpricedUnread;
    const known = entry.base + entry.unread;
    if (unpriced <= 0) return known;
    return known + unpriced * unpricedCallEstimate(largestKnown(entry), unpricedCallUsd);
  }

  /**
   * The figure a row recorded here at `at` counts in (`add`, `addUnpriced`), or none: a month this
   * project's figures have already left, a time before what a creation made it forget, or a call
   * begun before the project's creation (left out, its row noted: the figure stays until it is
   * written).
   */
  function countingEntry(
    projectId: string,
    at: Date,
    latencyMs: number,
    requestId: string | undefined,
  ): MonthSpend | undefined {
    const held = cache.get(projectId);
    if (held && at.getTime() < held.from) return undefined;
    const entry = monthOf(projectId, at);
    if (at.getTime() < entry.forgottenBefore) return undefined;
    if (leftOutAsBegunBefore(entry, at.getTime(), latencyMs, requestId)) {
      relist(entry);
      return undefined;
    }
    return entry;
  }

  /**
   * A project's room under its cap (`roomUnderCap`), and how this instance holds a place in it:
   * `holdHere` counts the call among its calls in flight (with `shared`, the release of its place
   * in Redis too), `roomHere` says whether its own count leaves room. The calls in flight here of a
   * price known before they ran count at it (`inFlightAbove`, what it is above the figure, counted
   * as spent); the Redis script counts places, each at the figure, so another instance counts them
   * at the figure alone.
   */
  function placeUnderCap(projectId: string, capUsd: number, spentUsd: number) {
    const entry = monthOf(projectId, deps.now());
    const unit = inFlightCallUsd(entry);
    const room = roomUnderCap(capUsd, spentUsd + entry.flight.inFlightAbove, unit);
    // For Redis, whose scripts count the places priced there themselves: the spend with only what
    // the calls priced here alone (Redis not reached then) cost above the figure.
    const unshared = Math.max(0, entry.flight.inFlightAbove - entry.flight.sharedAbove);
    const sharedRoom =
      unshared === entry.flight.inFlightAbove ? room : roomUnderCap(capUsd, spentUsd + unshared, unit);
    const figures: InFlightFigures = {
      unitNano: Math.round(unit * 1e9),
      leftNano: Math.round(capUsd * 1e9) - Math.round((spentUsd + unshared) * 1e9),
    };
    const holdHere = (shared?: SharedPlace): HeldPlace => {
      const flight = entry.flight;
      flight.inFlight++;
      entry.places++;
      relist(entry);
      let held = true;
      let above = 0;
      let aboveShared = false;
      let asked = false;
      /** Counts the call at `costUsd` here (`above`: what it is above the figure `unit`). */
      const countAt = (costUsd: number, unit: number, inRedis: boolean): "counted" => {
        above = Math.max(0, costUsd - unit);
        aboveShared = inRedis;
        flight.inFlightAbove += above;
        if (inRedis) flight.sharedAbove += above;
        return "counted";
      };
      return {
        release() {
          if (!held) return;
          held = false;
          flight.inFlight--;
          entry.places--;
          // Its floats summed and taken off again in another order may leave a trace: none is left
          // once no call is in flight.
          flight.inFlightAbove = flight.inFlight === 0 ? 0 : flight.inFlightAbove - above;
          if (aboveShared) flight.sharedAbove = flight.inFlight === 0 ? 0 : flight.sharedAbove - above;
          relist(entry);
          shared?.();
        },
        price(costUsd) {
          if (!held || asked || !(costUsd > 0)) return "counted";
          asked = true;
          // Compared in billionths of a dollar, as the cap is; the month's spend as now held (costs
          // recorded since the call was admitted count), never below what admission read.
          const cap = Math.round(capUsd * 1e9);
          const spent = Math.max(spentUsd, spentOf(entry));
          if (Math.round((spent + costUsd) * 1e9) > cap) return "over-cap";
          const unit = inFlightCallUsd(entry);
          // The others in flight here, each at the figure plus what its price is above it, and this
          // one at its price: the month may end at the cap, not past it.
          const here = (): KnownPriceVerdict => {
            const others = (flight.inFlight - 1) * unit + flight.inFlightAbove;
            if (Math.round((spent + others + costUsd) * 1e9) > cap) return "in-flight";
            return countAt(costUsd, unit, false);
          };
          if (!shared?.price) return here();
          // The others of every instance, in Redis, the priced ones at their price there; the spend
          // with what the calls priced here alone cost above the figure.
          const alone = Math.max(0, flight.inFlightAbove - flight.sharedAbove);
          return shared
            .price(Math.round(costUsd * 1e9), {
              unitNano: Math.round(unit * 1e9),
              leftNano: cap - Math.round((spent + alone) * 1e9),
            })
            .then((verdict) => {
              if (verdict === undefined) return held ? here() : "counted";
              if (verdict === "in-flight" || !held) return verdict;
              return countAt(costUsd, unit, true);
            });
        },
      };
    };
    const roomHere = () => room < 0 || entry.flight.inFlight < room;
    return { room, sharedRoom, figures, holdHere, roomHere };
  }

  /** `hold`, the place's `price` kept: what `holdWithLimits` answers without the limits in Redis. */
  function holdPlace(
    projectId: string,
    capUsd: number,
    spentUsd: number,
  ): HeldPlace | undefined | Promise<HeldPlace | undefined> {
    const { sharedRoom, figures, holdHere, roomHere } = placeUnderCap(projectId, capUsd, spentUsd);
    // No room at all (the month at its cap): the script would answer "full" and the fallback
    // refuse as well, so Redis is not asked. Admission never asks (its 403 comes first).
    if (!deps.shared || sharedRoom === 0) return roomHere() ? holdHere() : undefined;
    return deps.shared.take(projectId, sharedRoom, figures).then((taken) => {
      if (taken === "full") return undefined;
      if (taken) return holdHere(taken);
      // Redis did not decide: this instance's calls alone, as without Redis (counted now: others
      // may have been admitted here while the script was on its way).
      return roomHere() ? holdHere() : undefined;
    });
  }

  const guard = {
    /** How many projects' figures are held: memory stays bounded. */
    projects: () => cache.size,
    /**
     * Spend this calendar month (UTC), in USD, of the project created at `createdAt` (rows from
     * before then belong to a project deleted under its id), as the cap counts it: the known costs,
     * and each call of unknown cost at `unpricedCallEstimate` (never in a row or a report). `wait`:
     * the request's waits for stale cached reads, its credentials' among them (see `ReloadWait`).
     */
    async monthToDate(projectId: string, createdAt?: string, wait?: ReloadWait): Promise<number> {
      const now = deps.now();
      const entry = monthOf(projectId, now, createdAt);
      if (now.getTime() - entry.readAt > refreshMs) {
        // With a figure to judge on, the database is waited for `reloadWaitMs` at most, once for
        // every request meanwhile (and less by a request that waited for its credentials): one that
        // hangs does not hold each of them. A failed read leaves the last known figure to judge on
        // rather than failing open.
        if (entry.known) {
          if (entry.loading === undefined) {
            entry.loading = refresh(projectId, entry);
            entry.waited = withinReloadWait(
              entry.loading.catch(() => {}),
              undefined,
            );
            relist(entry);
          }
          if (entry.waited) await withinRequestWait(wait, entry.waited, undefined);
        } else {
          if (entry.loading === undefined) {
            entry.loading = refresh(projectId, entry);
            relist(entry);
          }
          await entry.loading;
        }
      }
      return spentOf(entry);
    },
    /**
     * Adds the cost of a usage row just recorded on this instance (and not yet written), to the
     * month of its `created_at` (`recordedAt`; now when not given). The row's own time, not a
     * second reading of the clock: a row stamped at a month's last millisecond and counted in the
     * next month would never be read back from that month, and its cost would count there for
     * good. A row of a month this project's figures have already left counts in none, nor one of a
     * call begun before the project's creation (`latencyMs`, the row's, before `recordedAt`; with
     * `requestId`, the row's, for `written` to leave out that row alone: without it, counted).
     */
    add(projectId: string, usd: number | null, recordedAt?: Date, latencyMs = 0, requestId?: string): void {
      if (!usd) return;
      const at = recordedAt ?? deps.now();
      const entry = countingEntry(projectId, at, latencyMs, requestId);
      if (entry === undefined) return;
      entry.unread += usd;
      if (at.getTime() > entry.latestUnread) entry.latestUnread = at.getTime();
      if (usd > entry.largestCall) {
        entry.largestCall = usd;
        entry.largestCallAt = at.getTime();
      }
      relist(entry);
    },
    /**
     * Counts a call of unknown cost (`countsAsUnpriced`) whose usage row was just recorded on this
     * instance (and not yet written), in the month of `recordedAt` as `add` counts a cost: at once,
     * at `unpricedCallEstimate`, until a read that began after its row was written holds it.
     */
    addUnpriced(projectId: string, recordedAt?: Date, latencyMs = 0, requestId?: string): void {
      const at = recordedAt ?? deps.now();
      const entry = countingEntry(projectId, at, latencyMs, requestId);
      if (entry === undefined) return;
      entry.unpricedUnread++;
      if (at.getTime() > entry.latestUnread) entry.latestUnread = at.getTime();
      relist(entry);
    },
    /**
     * Holds a place for a call of a project with a cap, `spentUsd` (`monthToDate`, just read) below
     * it, until the call's cost is recorded (`add`) and the returned release is called: or nothing,
     * the call not admitted, when the calls already in flight, each counted at the largest cost of
     * one call this month, would take the month to the cap. A call's cost is known only when it
     * ends: without this, any number of calls sent at once just under the cap were all admitted.
     * The largest cost is the larger of the largest row the month's read found (so an instance just
     * started, or another instance's calls, count too) and the largest recorded here since (`add`);
     * before either knows a cost this month, each counts at `unpricedCallUsd`; a call priced before it
     * ran (`HeldPlace.price`) counts at its price when larger. Compared in billionths of
     * a dollar, as the cap is. The calls in flight are this instance's, decided at once; with
     * `shared`, those of every instance sharing Redis, decided there in one script (a promise), and
     * this instance's again while Redis fails or rests.
     */
    hold(
      projectId: string,
      capUsd: number,
      spentUsd: number,
    ): (() => void) | undefined | Promise<(() => void) | undefined> {
      const held = holdPlace(projectId, capUsd, spentUsd);
      return held instanceof Promise ? held.then((place) => place?.release) : held?.release;
    },
    /**
     * `hold`, with the request's rate limits (`RateLimiter.inScript`) decided in the same script as
     * the shared place when the calls in flight are in Redis: one round trip where `hold` and then
     * the limits took two. Nothing (refused) when the calls in flight leave no room, the limits
     * neither asked nor counting the call; else the release, and the limits' `decisions` when Redis
     * decided them: the call admitted if they all allow it, else counted by none and holding no
     * place (its release does nothing). Without `decisions` (no Redis, Redis did not decide, or no
     * room was asked for) the caller asks the limits itself, as after `hold`.
     */
    holdWithLimits(
      projectId: string,
      capUsd: number,
      spentUsd: number,
      limits: LimitsInScript | undefined,
    ): HeldWithLimits | undefined | Promise<HeldWithLimits | undefined> {
      const shared = deps.shared;
      if (!shared?.takeWithLimits || !limits) return holdPlace(projectId, capUsd, spentUsd);
      const { sharedRoom, figures, holdHere, roomHere } = placeUnderCap(projectId, capUsd, spentUsd);
      // No room at all: refused without asking Redis, as `hold` does.
      if (sharedRoom === 0) return undefined;
      return shared.takeWithLimits(projectId, sharedRoom, limits, figures).then((taken) => {
        if (taken === "full") return undefined;
        if (taken === undefined) return roomHere() ? holdHere() : undefined;
        const { place, decisions } = taken;
        return place ? { ...holdHere(place), decisions } : { release: () => {}, decisions };
      });
    },
    /**
     * `holdWithLimits` as the part of another script (`ScriptPart`: a device token's ledger lookup
     * first), when the calls in flight are in Redis and there is room to ask for: its `decide`
     * answers as `holdWithLimits` does when Redis decided (nothing: no room, the limits neither asked
     * nor counting the call; else the release and the limits' decisions). None otherwise, and a
     * script that does not come to it holds nothing: the caller then asks `holdWithLimits`.
     */
    holdPart(
      projectId: string,
      capUsd: number,
      spentUsd: number,
      limits: LimitsInScript,
    ): ScriptPart<(HeldWithLimits & Pick<Required<HeldWithLimits>, "decisions">) | undefined> | undefined {
      const shared = deps.shared;
      if (!shared?.takePart) return undefined;
      const { sharedRoom, figures, holdHere } = placeUnderCap(projectId, capUsd, spentUsd);
      if (sharedRoom === 0) return undefined;
      const part = shared.takePart(projectId, sharedRoom, limits, figures);
      return {
        ...part,
        decide(reply) {
          const taken = part.decide(reply);
          if (taken === "full") return undefined;
          const decisions = taken.decisions;
          return taken.place ? { ...holdHere(taken.place), decisions } : { release: () => {}, decisions };
        },
      };
    },
    /**
     * Usage rows now in the database (the usage recorder's `onWritten`): the next read counts
     * their costs, so they stop being counted here when it begins. A row that is never written
     * (dropped from a full queue, refused, lost at shutdown) stays counted on this instance.
     */
    written(rows: readonly UsageRecord[]): void {
      for (const row of rows) {
        const unpriced = countsAsUnpriced(row);
        if (!row.cost_usd && !unpriced) continue;
        const entry = cache.get(row.project_id);
        if (!entry || !row.created_at.startsWith(entry.prefix)) continue;
        // Left out when it was recorded (a call begun before the creation): not counted, not taken
        // off; first, so that it is let go of whatever came since (another creation).
        if (entry.begunBeforeLeftOut.size > 0 && entry.begunBeforeLeftOut.delete(row.request_id)) {
          relist(entry);
          continue;
        }
        // Parsed only for a project created again (Date.parse: ~1,700 instructions a row).
        if (
          entry.forgottenBefore > Number.NEGATIVE_INFINITY &&
          Date.parse(row.created_at) < entry.forgottenBefore
        )
          continue;
        // Both for a row of a known cost and a part unknown (`provider_answered` 2).
        if (unpriced) entry.unpricedWritten += row.requests;
        if (row.cost_usd) entry.written += row.cost_usd;
        relist(entry);
      }
    },
  };
  return guard;
}

/**
 * Whether the call of a row stamped at `at` (epoch ms), `latencyMs` long, at or after the project's
 * creation the month is read from (`creationMs`), began before it, as the read decides it
 * (`spendSince`'s `fromCreation`: within the millisecond a row's time is cut to): a call of a
 * project deleted under the id that ended after the new one was created. A row stamped before the
 * creation is left to `forgottenBefore`, as before (counted here until written when not forgotten,
 * and taken off then). Left out only with its row's `requestId`, noted for `written`
 * (`begunBeforeLeftOut`); without it, counted, and taken off once written, as any.
 */
function leftOutAsBegunBefore(
  entry: MonthSpend,
  at: number,
  latencyMs: number,
  requestId: string | undefined,
): boolean {
  if (requestId === undefined || at < entry.creationMs || !(at - latencyMs + 1 <= entry.creationMs))
    return false;
  entry.begunBeforeLeftOut.add(requestId);
  return true;
}

/**
 * The largest known cost of one call of the project this month: the largest row the month's read
 * found, or a larger one this instance recorded since (`add`).
 */
function largestKnown(entry: MonthSpend): number {
  return Math.max(entry.largestRead, entry.largestCall);
}

/**
 * How many calls may be in flight before one more is refused: the fewest at which the month's
 * spend plus each of them at `largestUsd` reaches the cap (compared in billionths of a dollar, as
 * the cap is); -1 when no number reaches it (`largestUsd` 0, or a cost so small that no number of
 * calls in flight could).
 */
export function roomUnderCap(capUsd: number, spentUsd: number, largestUsd: number): number {
  const cap = Math.round(capUsd * 1e9);
  const admits = (count: number) => Math.round((spentUsd + count * largestUsd) * 1e9) < cap;
  if (!admits(0)) return 0;
  if (!(largestUsd > 0)) return -1;
  // Within one or two of the answer; the sums decide it exactly.
  let room = Math.max(1, Math.floor((capUsd - spentUsd) / largestUsd));
  if (!(room <= maxRoom)) return -1;
  while (room > 1 && !admits(room - 1)) room--;
  while (admits(room)) {
    room++;
    if (room > maxRoom) return -1;
  }
  return room;
}

/** More calls in flight than any instance holds: no room at all to count. */
const maxRoom = 1e9;
