import { formerProviderKeyAad, providerKeyAad } from "../admin/project-admin.js";
import { projectIdPattern } from "../admin/project-id.js";
import { detachedString } from "../detached-string.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  databaseUnavailable,
  isDatabaseUnavailable,
  type ReloadWait,
  withinReloadWait,
  withinRequestWait,
} from "../storage/database-unavailable.js";
import type { KeyRepository, ProviderKeyRecord } from "../storage/key-repository.js";
import type { Project, ProjectRepository } from "../storage/project-repository.js";
import { unpooledCopy } from "../unpooled-copy.js";
import type { SecretBox } from "./secret-box.js";

export interface CredentialDirectoryDeps {
  projects: ProjectRepository;
  keys: KeyRepository;
  secretBox: SecretBox;
  /** How long a cached record is trusted; changes made elsewhere show up within this time. */
  ttlMs: number;
  /**
   * How old a record may be and still be served while the database cannot be read (stale-if-error);
   * past it the caller gets SERVICE_UNAVAILABLE: a revocation made elsewhere during a partition is
   * honoured within this time at the latest. Default 5 minutes.
   */
  maxStaleMs?: number;
  now?: () => number;
  /**
   * How many records of each kind are held, and apart from them how many misses (ids read as
   * missing, reads not answered yet). Past it the least recently used goes, one at a time.
   */
  maxEntries?: number;
}

interface Entry<T> {
  /** When `value` was read from the database (a failed reload does not move it). */
  at: number;
  /** After a failed reload: no other is tried before this time, and the value is served as it is. */
  retryAt?: number | undefined;
  /** Why the last reload failed, for the SERVICE_UNAVAILABLE of a value too old to serve. */
  failure?: unknown;
  value: Promise<T>;
  /** Set once `value` resolved, so a fresh hit can be read synchronously. */
  settled: { value: T } | undefined;
  /** A stale entry's reload in flight. */
  reload?: Promise<T> | undefined;
  /** The same reload as its callers wait for it: `reloadWaitMs` at most, then the value known. */
  waited?: Promise<T> | undefined;
}

/**
 * The entries of one kind of record. `known` holds the records read, `misses` the ids read as
 * missing (null) and the reads not answered yet. Ids come from callers, unauthenticated ones too,
 * so misses are held apart and never displace a known record: those are what is served while the
 * database cannot be read. Each map holds `maxEntries` at most; past it the one at the front goes.
 * An entry goes to the back when it is stored and whenever it is read again from the database
 * (once per TTL while it is asked for), so the front is the least recently used, to within a TTL,
 * and a fresh hit costs one lookup and no reordering.
 */
interface Entries<T> {
  known: Map<string, Entry<T>>;
  misses: Map<string, Entry<T>>;
}

export interface CachedKey {
  record: ProviderKeyRecord;
  /**
   * The opened server share, decrypted on first use (only once a caller's client share matched the
   * record's digest) and then held in memory only, never logged.
   */
  serverShare(): Buffer;
}

/**
 * A read-through cache of what authentication needs on every request: the project, its test-key
 * digests and its provider key records with their server shares opened. Concurrent misses for
 * one id share one database read. `invalidate` drops a project at once on this instance; other
 * instances see changes within `ttlMs`.
 */
export function createCredentialDirectory(deps: CredentialDirectoryDeps) {
  const now = deps.now ?? Date.now;
  const maxEntries = deps.maxEntries ?? 10_000;
  const maxStaleMs = deps.maxStaleMs ?? 300_000;
  const entries = <T>(): Entries<T> => ({ known: new Map(), misses: new Map() });
  const projects = entries<Project | null>();
  const testKeys = entries<string[]>();
  const keys = entries<CachedKey | null>();
  const keyProviders = entries<ReadonlySet<ProviderId>>();
  let generation = 0;

  function entryOf<T>(held: Entries<T>, id: string): Entry<T> | undefined {
    return held.known.get(id) ?? held.misses.get(id);
  }

  /**
   * Stores `entry` as `id`'s (in place of any other), at the back of the map its value belongs in:
   * `known` once it holds a record, `misses` otherwise. A full map first lets its front one go.
   * The id is kept as a copy: ids are cut from request lines and headers (see detachedString).
   */
  function hold<T>(held: Entries<T>, id: string, entry: Entry<T>): void {
    drop(held, id);
    const map = entry.settled !== undefined && entry.settled.value !== null ? held.known : held.misses;
    if (map.size >= maxEntries)
      for (const oldest of map.keys()) {
        map.delete(oldest);
        break;
      }
    map.set(detachedString(id), entry);
  }

  /** Drops `id`'s entry, record or miss. */
  function drop<T>(held: Entries<T>, id: string): void {
    held.known.delete(id);
    held.misses.delete(id);
  }

  /**
   * Read-through with stale-if-error: when the database cannot be read, the last known value is
   * served (a blip must not fail traffic that was working); with nothing known, the caller gets
   * SERVICE_UNAVAILABLE. Any other failure (a sealed share that does not open, say) is passed on
   * as it is: it is no outage, and retrying will not help. A stale value is reloaded once for all
   * its callers, who wait for the reload at most `reloadWaitMs` (or less: `wait`, the request's
   * waits for stale records, is `reloadWaitMs` in all), then get the value they had while the reload
   * goes on; it replaces the entry when it answers. After a failed reload the value is served for
   * another TTL before the next try, but only while it is younger than `maxStaleMs`:
   * then the callers wait for the reload and get its failure (a revocation the database holds must
   * not be missed for ever because this instance cannot read it).
   */
  function cached<T>(
    held: Entries<T>,
    id: string,
    wait: ReloadWait | undefined,
    load: () => Promise<T>,
  ): Promise<T> {
    const entry = entryOf(held, id);
    const time = now();
    if (entry && time - entry.at < deps.ttlMs) return entry.value;
    if (entry?.settled !== undefined) {
      const tooOld = time - entry.at >= maxStaleMs;
      if (entry.retryAt !== undefined && time < entry.retryAt)
        return tooOld ? Promise.reject(databaseUnavailable(entry.failure)) : entry.value;
      if (entry.reload === undefined) {
        entry.reload = reload(held, id, entry, load);
        hold(held, id, entry); // asked for again: to the back, away from eviction
      }
      if (tooOld) return entry.reload;
      const known = entry.settled.value;
      entry.waited ??= withinReloadWait(
        entry.reload.catch(() => known),
        known,
      );
      return withinRequestWait(wait, entry.waited, known);
    }
    const value = load().catch(async (error: unknown) => {
      if (held.misses.get(id) === fresh) held.misses.delete(id);
      throw isDatabaseUnavailable(error) ? databaseUnavailable(error) : error;
    });
    const fresh: Entry<T> = { at: time, value, settled: undefined };
    value.then(
      (known) => {
        fresh.settled = { value: known };
        // A record read joins the known ones, unless an invalidation or eviction dropped the read.
        if (known !== null && held.misses.get(id) === fresh) hold(held, id, fresh);
      },
      () => {},
    );
    hold(held, id, fresh);
    return value;
  }

  /** Reloads a stale entry: the new value, or the failure (the entry keeps its value and read time). */
  function reload<T>(held: Entries<T>, id: string, entry: Entry<T>, load: () => Promise<T>): Promise<T> {
    const started = now();
    return load().then(
      (value) => {
        // Not after an invalidation meanwhile: this read may predate the change that caused it.
        if (entryOf(held, id) === entry)
          hold(held, id, { at: started, value: Promise.resolve(value), settled: { value } });
        return value;
      },
      (error: unknown) => {
        // Stale-if-error: the value it had stays (still as old as it is) until the next try.
        if (entryOf(held, id) === entry) {
          entry.retryAt = now() + deps.ttlMs;
          entry.failure = error;
          entry.reload = undefined;
          entry.waited = undefined;
        }
        throw isDatabaseUnavailable(error) ? databaseUnavailable(error) : error;
      },
    );
  }

  /** The fresh value already read for `id`, without a promise; undefined when it is not at hand. */
  function settled<T>(held: Entries<T>, id: string): T | undefined {
    const entry = entryOf(held, id);
    if (entry?.settled === undefined || now() - entry.at >= deps.ttlMs) return undefined;
    return entry.settled.value;
  }

  return {
    /**
     * Null for an id no project can have, without a lookup or a cache entry: ids come from URLs,
     * and PostgreSQL refuses some (a NUL) outright. `wait`, here and below: the request's waits for
     * stale records (see `ReloadWait`).
     */
    project: (id: string, wait?: ReloadWait) =>
      projectIdPattern.test(id)
        ? cached(projects, id, wait, () => deps.projects.get(id))
        : Promise.resolve(null),
    /**
     * The project as `project(id)` would give it, when that answer is already in memory and fresh:
     * the hot path reads it without waiting a turn; undefined means "ask `project(id)`".
     */
    settledProject: (id: string) => settled(projects, id),
    /**
     * Whether this instance holds a record of the project, fresh or due to be read again: a project
     * known to exist, whose lookup is no attempt that may fail (the failed-authentication throttle
     * holds no slot for it). False for an id read as missing or not read yet.
     */
    holdsProject: (id: string) => projects.known.has(id),
    testKeyDigests: (projectId: string, wait?: ReloadWait) =>
      cached(testKeys, projectId, wait, async () =>
        (await deps.keys.listTestKeys(projectId)).map((key) => key.digest),
      ),
    key: (keyId: string, wait?: ReloadWait) =>
      cached(keys, keyId, wait, async () => {
        const record = await deps.keys.getProviderKey(keyId);
        return record ? cachedKey(record, deps.secretBox) : null;
      }),
    /** The providers a project holds a provider key for that is not revoked (the model lists ask). */
    keyProviders: (projectId: string) =>
      cached(keyProviders, projectId, undefined, async () => {
        const records = await deps.keys.listProviderKeys(projectId);
        return new Set(
          records.filter((record) => record.revokedAt === null).map((record) => record.provider),
        );
      }),
    /**
     * When the oldest of the records that authenticate a project's caller (the project, its test
     * keys, the provider key `keyId`) was read from the database: a result worked out from them is
     * no fresher than that, and is trusted no longer than they are (another instance's revocation
     * shows within the TTL).
     */
    readAt(projectId: string, keyId: string | null): number {
      // On every admitted call (twice): three lookups, no array built for them.
      let oldest = now();
      const project = entryOf(projects, projectId);
      if (project && project.at < oldest) oldest = project.at;
      const digests = entryOf(testKeys, projectId);
      if (digests && digests.at < oldest) oldest = digests.at;
      const key = keyId ? entryOf(keys, keyId) : undefined;
      if (key && key.at < oldest) oldest = key.at;
      return oldest;
    },
    /**
     * Whether any project's record is held, fresh or not: its callers can be served from memory
     * while the database is down (stale-if-error). /health asks, to tell degraded from unavailable.
     */
    holdsProjects(): boolean {
      const time = now();
      for (const entry of projects.known.values())
        if (entry.settled?.value && time - entry.at < maxStaleMs) return true;
      return false;
    },
    /** How many entries are held, records and misses apart: memory stays bounded. */
    entryCounts() {
      const count = <T>(held: Entries<T>) => ({ known: held.known.size, misses: held.misses.size });
      return {
        projects: count(projects),
        testKeys: count(testKeys),
        keys: count(keys),
        keyProviders: count(keyProviders),
      };
    },
    /** Changes whenever anything is invalidated, so caches built on this one know to drop entries. */
    generation: () => generation,
    ttlMs: deps.ttlMs,
    now,
    invalidate(projectId: string) {
      generation++;
      drop(projects, projectId);
      drop(testKeys, projectId);
      drop(keyProviders, projectId);
      // The project's key records, and those not read yet or read as missing (a key just added);
      // other projects' stay, so they are still served if the database goes down next.
      keys.misses.clear();
      for (const [keyId, entry] of keys.known)
        if (entry.settled?.value?.record.projectId === projectId) keys.known.delete(keyId);
    },
  };
}

export type CredentialDirectory = ReturnType<typeof createCredentialDirectory>;

/**
 * The record with its server share opened on first use. Built here, out of `key`'s scope: a closure
 * made there would hold that scope's key id, cut from the request's Authorization header (with a
 * DeviceCheck token, up to 8 KiB), for as long as the record is cached.
 */
function cachedKey(record: ProviderKeyRecord, secretBox: SecretBox): CachedKey {
  let opened: Buffer | null = null;
  const serverShare = (): Buffer => {
    if (opened) return opened;
    try {
      opened = unpooledCopy(
        secretBox.open(
          record.sealedServerShare,
          providerKeyAad(record.projectId, record.provider, record.id),
          formerProviderKeyAad(record.projectId, record.id),
        ),
      );
    } catch (error) {
      throw new Error(
        `The server share of provider key ${record.id} does not open with this master key: was it stored under another SLUICE_MASTER_KEY, or its row's project or provider changed?`,
        { cause: error },
      );
    }
    return opened;
  };
  return { record, serverShare };
}
