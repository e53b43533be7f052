import type { UsageRecord } from "../storage/usage-repository.js";

export interface RefusalCoalescerOptions {
  /** Where a row to write goes (the usage queue). */
  write: (row: UsageRecord) => void;
  /** Epoch ms: when a minute has ended. */
  now?: () => number;
  /** A refusal's row of one key written one by one each minute; the rest are coalesced (default 10). */
  rowsPerMinute?: number;
  /** Keys tracked at once; a refusal of a key beyond them is written as a row of its own (default 10,000). */
  maxKeys?: number;
  /** A refusal held, to be written as part of its key's coalesced row (for a metric). */
  onCoalesced?: (row: UsageRecord) => void;
}

export interface RefusalCoalescer {
  /** Writes `row` now (one of its key's first this minute, or no room to track the key), or holds it. */
  offer(row: UsageRecord): void;
  /** Writes the coalesced rows of the minutes that ended; does anything only once a minute. */
  sweep(): void;
  /** Every coalesced row held, taken off (a flush, the shutdown); the minutes' counts go on. */
  takeAll(): UsageRecord[];
  /** Requests held, not written yet. */
  held(): number;
  /** Keys tracked. */
  keys(): number;
}

interface Entry {
  /** The minute (`created_at` to the minute, UTC) its counts are of. */
  minute: string;
  /** Requests of the key seen this minute. */
  seen: number;
  /** Requests held for the coalesced row, and the last of them (whose columns the row keeps). */
  held: number;
  last: UsageRecord | null;
}

/**
 * Bounds the usage rows an authenticated client's repeated refusals write (a 429 of the rate
 * limits, a 403 after authentication: docs/decisions/0015) without losing their count. Per key
 * (the project, key, endpoint, provider, model, status, error code, outcome and auth method: every
 * column a report groups or filters by, but the time and the client's address) and minute of
 * `created_at`, the first `rowsPerMinute` rows are written as they come; the rest are held, and
 * written as one row once the minute ended (at the next sweep, or the key's next refusal), with
 * `requests` the count and every other column the last one's (its request id: that request has no
 * row of its own, so the id is unique). A key beyond `maxKeys` is not tracked: its rows are written
 * one by one, as before, until a minute's sweep makes room.
 */
export function createRefusalCoalescer(options: RefusalCoalescerOptions): RefusalCoalescer {
  const rowsPerMinute = options.rowsPerMinute ?? 10;
  const maxKeys = options.maxKeys ?? 10_000;
  const now = options.now ?? Date.now;
  /** The keys' counts of their current minute. */
  const entries = new Map<string, Entry>();
  let heldTotal = 0;
  let sweptMinute = "";

  /** The row an entry's held requests become, and the entry emptied. */
  function coalesced(entry: Entry): UsageRecord | null {
    const last = entry.last;
    if (last === null) return null;
    const row = { ...last, requests: entry.held };
    heldTotal -= entry.held;
    entry.held = 0;
    entry.last = null;
    return row;
  }

  function sweep(): void {
    const current = minuteOf(new Date(now()).toISOString());
    if (current === sweptMinute) return;
    sweptMinute = current;
    for (const [key, entry] of entries) {
      if (entry.minute >= current) continue;
      entries.delete(key);
      const row = coalesced(entry);
      if (row) options.write(row);
    }
  }

  return {
    offer(row) {
      const key = keyOf(row);
      const minute = minuteOf(row.created_at);
      let entry = entries.get(key);
      if (entry && entry.minute !== minute) {
        entries.delete(key);
        const previous = coalesced(entry);
        if (previous) options.write(previous);
        entry = undefined;
      }
      if (!entry) {
        if (entries.size >= maxKeys) sweep();
        if (entries.size >= maxKeys) {
          options.write(row);
          return;
        }
        entry = { minute, seen: 0, held: 0, last: null };
        entries.set(key, entry);
      }
      entry.seen += row.requests;
      if (entry.seen <= rowsPerMinute) {
        options.write(row);
        return;
      }
      entry.held += row.requests;
      entry.last = row;
      heldTotal += row.requests;
      options.onCoalesced?.(row);
    },
    sweep,
    takeAll() {
      const rows: UsageRecord[] = [];
      for (const entry of entries.values()) {
        const row = coalesced(entry);
        if (row) rows.push(row);
      }
      return rows;
    },
    held: () => heldTotal,
    keys: () => entries.size,
  };
}

/** `YYYY-MM-DDTHH:MM` of an ISO timestamp. */
function minuteOf(timestamp: string): string {
  return timestamp.slice(0, 16);
}

/** Every column a report groups or filters by, but the time; and those the coalesced row says of all. */
function keyOf(row: UsageRecord): string {
  return JSON.stringify([
    row.project_id,
    row.key_id,
    row.endpoint,
    row.provider,
    row.model,
    row.status,
    row.error_code,
    row.outcome,
    row.auth_method,
  ]);
}
