import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { type LimitsInScript, luaConsumeLimits, type RateLimitDecision } from "../rate-limit/rate-limiter.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { redisKeyPrefixes } from "../redis/redis-keys.js";
import { RedisScript, type ScriptPart } from "../redis/redis-script.js";

/** How long a call's place in Redis lasts unless this instance renews it (ms): a crash leaves it no longer. */
export const defaultPlaceTtlMs = 30_000;

/**
 * The figures the asking instance counts the calls in flight by, in billionths of a dollar (whole
 * numbers): `unitNano` what each counts at (the month's largest call), `leftNano` what the cap leaves
 * above the month's spend. With them a script counts the places priced before their calls ran
 * (`SharedPlace.price`) at their price: each at what it is above `unitNano` more than the others.
 */
export interface InFlightFigures {
  unitNano: number;
  leftNano: number;
}

/**
 * What `SharedPlace.price` answered: the call counted at its price on every instance (`counted`),
 * not (`in-flight`: the month's spend, the calls in flight of every instance and it would pass the
 * cap), or `undefined` when Redis could not decide: the caller decides on this instance alone.
 */
export type SharedPriceVerdict = "counted" | "in-flight" | undefined;

/**
 * A place taken: the release (call once, when the call's cost is known), with `price`, which counts
 * it at the price of its call, known before it runs, on every instance (in nanodollars, whole),
 * if the month's spend and the calls in flight of every instance leave room for it, in one script.
 */
export type SharedPlace = (() => void) & {
  price?(priceNano: number, figures: InFlightFigures): Promise<SharedPriceVerdict>;
};

/**
 * What taking a place answered: the place (`SharedPlace`), `"full"` when the project's calls in
 * flight on every instance left no room, or `undefined` when Redis could not decide (down, resting,
 * an error reply): the caller decides on this instance alone.
 */
export type SharedTake = SharedPlace | "full" | undefined;

/**
 * What taking a place with the request's rate limits in the same script answered: `"full"` (the
 * limits not asked, nothing counted) or `undefined` as for `SharedTake`; else the limits' decisions
 * and, when they admitted the call, its place (a call they refuse takes none and counts in none).
 */
export type SharedTakeWithLimits =
  | { place: SharedPlace | undefined; decisions: RateLimitDecision[] }
  | "full"
  | undefined;

export interface SharedCallsInFlight {
  /**
   * Takes a place among the project's calls in flight on every instance sharing the Redis, if fewer
   * than `room` hold one (`room` < 0: any number), in one Lua script: two instances never both take
   * the last place. With `figures`, and places priced there (`SharedPlace.price`), also only if the
   * places, each at `unitNano` and the priced ones at their price, are below `leftNano`.
   */
  take(projectId: string, room: number, figures?: InFlightFigures): Promise<SharedTake>;
  /**
   * `take`, then, only when there was room, the request's rate limits (`RateLimiter.inScript`) in
   * the same script, one round trip: the place is taken only if the limits admit the call, and the
   * limits are counted only if there was a place. Optional: a caller without it sends the two apart.
   */
  takeWithLimits?(
    projectId: string,
    room: number,
    limits: LimitsInScript,
    figures?: InFlightFigures,
  ): Promise<SharedTakeWithLimits>;
  /**
   * `takeWithLimits` as the part of another script (`ScriptPart`), decided there after what that
   * script decides first (a device token's ledger lookup), in its round trip: its `decide` answers
   * as `takeWithLimits` does when Redis decided. A script that does not come to it takes nothing.
   */
  takePart?(
    projectId: string,
    room: number,
    limits: LimitsInScript,
    figures?: InFlightFigures,
  ): ScriptPart<Exclude<SharedTakeWithLimits, undefined>>;
  /** Places this instance holds in Redis (renewed on its timer): memory stays bounded by the calls in flight. */
  held(): number;
  /**
   * Stops the renewal timer and waits for the removals on their way (on close, before the client
   * disconnects: the places of the calls that ended last are not left to expire); a removal that
   * failed is tried once more.
   */
  close(): Promise<void>;
}

export interface SharedCallsInFlightOptions {
  /** A client built by `createRedisClient` (../redis/redis-client.ts), so that a lost Redis fails fast. */
  redis: Redis;
  /** The client's shared health (see `RedisBreaker`); by default one of its own. */
  breaker?: RedisBreaker | undefined;
  /** What every key begins with; `sluice:spend-in-flight` by default (see `redisKeyPrefixes`). */
  keyPrefix?: string;
  /** How long a place lasts unless renewed (ms, default 30 s); renewed every third of it. */
  placeTtlMs?: number;
  /**
   * Called with the Redis key of a project's places that held what Sluice never writes there (a
   * key of another type): the script deleted it and counted afresh. Redis is not taken for down.
   */
  onKeyRepaired?: (key: string) => void;
}

/**
 * The spend cap's calls in flight of each project counted in Redis, for all the instances that
 * share it: a sorted set per project (`sluice:spend-in-flight:<project id>`) whose members are the
 * calls (a random id of this instance's, and a counter) and whose scores are when each place
 * expires, in Redis's own time. Taking a place drops the expired ones, counts the rest and adds the
 * call only if they are fewer than the room the caller computed, all in one script. A place is
 * given back when its call's cost is recorded; while the call runs, this instance renews its places
 * every third of their lifetime (one script per project, a timer only while it holds any), so a
 * call longer than the lifetime keeps its place, and an instance that crashed leaves its places for
 * one lifetime at most (30 s). A place that could not be given back (Redis down at the time) is
 * given back with the next renewal, or expires; so is the place of a take that failed, which Redis
 * may have run all the same (it answered past the command timeout). A place that expired in Redis
 * while its call ran (an outage longer than its lifetime, Redis restarted) is put back by the first
 * renewal once Redis answers again, with a fresh lifetime: the call counts for every instance again.
 *
 * Redis fails (down, hanging, an error reply) or rests: `take` answers `undefined` at once and the
 * caller decides on this instance's count alone, as the rate limits do; the `RedisBreaker` is the
 * one the limits share, so their fallback (the degraded gauge, the warning) reports it.
 */
export function createSharedCallsInFlight(options: SharedCallsInFlightOptions): SharedCallsInFlight {
  const client = options.redis;
  const breaker = options.breaker ?? new RedisBreaker(client);
  const prefix = options.keyPrefix ?? redisKeyPrefixes().spendInFlight;
  const ttlMs = Math.max(3, Math.floor(options.placeTtlMs ?? defaultPlaceTtlMs));
  const instance = randomUUID();
  let calls = 0;
  /**
   * Per Redis key: the places held, and those given back whose removal has not reached Redis yet
   * (or that a failed take may have left there), each with when it has surely expired there; and
   * whether a renewal of the key was missed (Redis down or resting) or Redis may have lost its
   * places since the last one (the client reconnected: a restart, a failover), so that the next
   * renewal puts back the places held that are no longer there.
   */
  const places = new Map<string, Places>();
  let timer: NodeJS.Timeout | undefined;
  let renewing: Promise<void> | undefined;
  let closed = false;
  /** Removals sent and not yet answered. */
  const removing = new Set<Promise<void>>();

  function placesOf(key: string) {
    let entry = places.get(key);
    if (!entry) {
      entry = { held: new Map(), gone: new Map(), lapsed: false };
      places.set(key, entry);
    }
    return entry;
  }

  function forget(key: string): void {
    const entry = places.get(key);
    if (entry && entry.held.size === 0 && entry.gone.size === 0) places.delete(key);
    if (places.size === 0 && timer) {
      clearInterval(timer);
      timer = undefined;
    }
  }

  function arm(): void {
    if (timer) return;
    timer = setInterval(() => void renew(), Math.floor(ttlMs / 3));
    timer.unref();
  }

  /** Renews the places held and removes those given back, one script per project; once at a time. */
  function renew(): Promise<void> {
    renewing ??= renewAll().finally(() => {
      renewing = undefined;
    });
    return renewing;
  }

  // Connected again (after a drop, a restart, a failover): the places may be gone from Redis.
  client.on("ready", () => {
    for (const entry of places.values()) entry.lapsed = true;
  });

  async function renewAll(): Promise<void> {
    // A place past its lifetime is gone from Redis: an outage, which ends a renewal at its first
    // project, leaves no list to keep for any.
    const now = Date.now();
    for (const [key, entry] of [...places]) {
      for (const [member, expired] of entry.gone) if (expired <= now) entry.gone.delete(member);
      forget(key);
    }
    const keys = [...places];
    for (const [at, [key, entry]] of keys.entries()) {
      const held = [...entry.held];
      const gone = [...entry.gone.keys()];
      if (held.length === 0 && gone.length === 0) {
        forget(key);
        continue;
      }
      const pass = breaker.enter();
      if (pass === "rest") {
        // Not renewed this time: if Redis stays out of reach past a place's lifetime, the place
        // expires there while its call runs, and is put back once Redis answers.
        for (const [, rest] of keys.slice(at)) rest.lapsed = true;
        return;
      }
      const restore = entry.lapsed;
      entry.lapsed = false;
      try {
        await renewScript.run(
          client,
          [key, pricesKey(key)],
          [ttlMs, held.length, restore ? 1 : 0, ...held.flat(), ...gone],
        );
        breaker.leave(pass, true);
      } catch (error) {
        entry.lapsed = true;
        breaker.leave(pass, false, error);
        continue;
      }
      for (const member of gone) entry.gone.delete(member);
      // Put back whole (ZADD without XX), a place given back while the script was on its way was
      // added again when its release's ZREM reached Redis first: a script sent again as EVAL after
      // EVALSHA's NOSCRIPT (as after a Redis restart, which also sets `lapsed`) follows the ZREM.
      // Removed again, else it counted on every instance for its lifetime, held by no call.
      if (restore) for (const [member] of held) if (!entry.held.has(member)) giveAgain(key, member);
      forget(key);
    }
  }

  /** `give` of a place whose removal may have been overtaken, the renewal timer kept until it is done. */
  function giveAgain(key: string, member: string): void {
    give(key, member);
    if (!closed) arm();
  }

  /** Marks a place as given back (no longer renewed), to be removed from Redis until it expires. */
  function goneFrom(key: string, member: string) {
    const entry = placesOf(key);
    entry.held.delete(member);
    entry.gone.set(member, Date.now() + ttlMs);
    return entry;
  }

  function give(key: string, member: string, priced = false): void {
    const entry = goneFrom(key, member);
    const pass = breaker.enter();
    if (pass === "rest") return;
    // A priced place's price goes with it (else a later script drops it: its member is gone).
    const removed = priced
      ? Promise.all([client.zrem(key, member), client.hdel(pricesKey(key), member)])
      : client.zrem(key, member);
    const removal = removed.then(
      () => {
        breaker.leave(pass, true);
        entry.gone.delete(member);
        forget(key);
      },
      (error: unknown) => breaker.leave(pass, false, error),
    );
    removing.add(removal);
    void removal.finally(() => removing.delete(removal));
  }

  /**
   * Runs a script that takes or prices a place (`takeScript`, `takeWithLimitsScript`,
   * `priceScript`) behind the breaker: its reply, or undefined when Redis did not decide (resting;
   * failed: `failed` is then called). `sending` is called when the breaker lets the script go, before
   * it is sent.
   */
  async function runPlaceScript(
    script: RedisScript,
    keys: string[],
    args: (string | number)[],
    failed?: () => void,
    sending?: () => void,
  ): Promise<number[] | undefined> {
    const pass = breaker.enter();
    if (pass === "rest") return undefined;
    sending?.();
    let reply: number[];
    try {
      reply = (await script.run(client, keys, args)) as number[];
    } catch (error) {
      breaker.leave(pass, false, error);
      failed?.();
      return undefined;
    }
    breaker.leave(pass, true);
    return reply;
  }

  /**
   * A take script that failed: Redis may have run it all the same and answered past the command
   * timeout. The place it took, which no release names, is removed with the next renewal, not
   * counted against the cap on every instance until it expires.
   */
  function takeFailed(key: string, member: string): void {
    goneFrom(key, member);
    arm();
  }

  /** `takePart`: the place and the limits (`luaPlaceAndLimits`), and what their reply answers. */
  function takePart(
    projectId: string,
    room: number,
    limits: LimitsInScript,
    figures?: InFlightFigures,
  ): ScriptPart<Exclude<SharedTakeWithLimits, undefined>> {
    const key = `${prefix}:${projectId}`;
    const member = `${instance}:${++calls}`;
    return {
      lua: luaPlaceAndLimits,
      keys: [key, pricesKey(key), ...limits.keys],
      args: [room, member, ttlMs, ...figureArgs(figures), ...limits.args],
      decide(reply) {
        if (reply[2] === 1) options.onKeyRepaired?.(key);
        if (reply[0] === 0) return "full";
        const decisions = limits.decide(reply.slice(3));
        return { place: reply[0] === 1 ? placeTaken(key, member) : undefined, decisions };
      },
      failed: () => takeFailed(key, member),
    };
  }

  /** The place the script took: held (renewed) until its release, called once. */
  function placeTaken(key: string, member: string): SharedPlace {
    placesOf(key).held.set(member, 0);
    arm();
    let held = true;
    // A price may be in Redis (told, or on its way): the release removes it with the place.
    let priced = false;
    const release = () => {
      if (!held) return;
      held = false;
      give(key, member, priced);
    };
    return Object.assign(release, {
      async price(priceNano: number, figures: InFlightFigures): Promise<SharedPriceVerdict> {
        if (!held) return undefined;
        const reply = await runPlaceScript(
          priceScript,
          [key, pricesKey(key)],
          [member, priceNano, figures.unitNano, figures.leftNano, ttlMs],
          undefined,
          () => {
            priced = true;
          },
        );
        if (reply === undefined) return undefined;
        if (reply[1] === 1) options.onKeyRepaired?.(key);
        if (reply[0] !== 1) return "in-flight";
        // Released while the script was on its way: its removal, sent after it, took the price too.
        const entry = places.get(key);
        if (held && entry?.held.has(member)) entry.held.set(member, priceNano);
        return "counted";
      },
    });
  }

  return {
    async take(projectId, room, figures) {
      const key = `${prefix}:${projectId}`;
      const member = `${instance}:${++calls}`;
      const reply = await runPlaceScript(
        takeScript,
        [key, pricesKey(key)],
        [room, member, ttlMs, ...figureArgs(figures)],
        () => takeFailed(key, member),
      );
      if (reply === undefined) return undefined;
      if (reply[2] === 1) options.onKeyRepaired?.(key);
      if (reply[0] !== 1) return "full";
      return placeTaken(key, member);
    },
    async takeWithLimits(projectId, room, limits, figures) {
      const part = takePart(projectId, room, limits, figures);
      const reply = await runPlaceScript(takeWithLimitsScript, part.keys, part.args, () => part.failed?.());
      return reply === undefined ? undefined : part.decide(reply);
    },
    takePart,
    held: () => {
      let count = 0;
      for (const entry of places.values()) count += entry.held.size;
      return count;
    },
    async close() {
      closed = true;
      if (timer) clearInterval(timer);
      timer = undefined;
      await Promise.all(removing);
      if (places.size > 0) await renew();
      // The removals that renewal sent again (`giveAgain`).
      await Promise.all(removing);
    },
  };
}

/** One Redis key's places on this instance (see `places` in createSharedCallsInFlight). */
interface Places {
  /** The places held, each with its call's price in nanodollars (0: none told, counted at the figure). */
  held: Map<string, number>;
  gone: Map<string, number>;
  lapsed: boolean;
}

/** The Redis key of the prices of a project's places (`key`): a hash, place member to nanodollars. */
function pricesKey(key: string): string {
  return `${key}:prices`;
}

/** The script arguments of `figures`: none counts the priced places at nothing above the figure. */
function figureArgs(figures: InFlightFigures | undefined): (string | number)[] {
  return figures ? [figures.unitNano, figures.leftNano] : ["", ""];
}

/** Lua: Redis's time, in ms. */
const luaNowMs = `local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)`;

/**
 * Lua: a key of the project's places (`key`, KEYS[1] by default) of another type than a sorted set
 * (written by another program inside the prefix) is deleted, `repaired` set to 1; expired places,
 * and places expiring later than any Sluice writes (`ttl` from now: a manual ZADD), are dropped.
 * So is the key of their prices (`prices`, KEYS[2] by default) of another type than a hash.
 */
const luaPrune = (ttl: string, key = "KEYS[1]", prices = "KEYS[2]") => `local repaired = 0
local kind = redis.call("TYPE", ${key}).ok
if kind ~= "zset" and kind ~= "none" then
  redis.call("DEL", ${key})
  repaired = 1
end
local pricesKind = redis.call("TYPE", ${prices}).ok
if pricesKind ~= "hash" and pricesKind ~= "none" then
  redis.call("DEL", ${prices})
  repaired = 1
  pricesKind = "none"
end
${luaNowMs}
redis.call("ZREMRANGEBYSCORE", ${key}, "-inf", now)
redis.call("ZREMRANGEBYSCORE", ${key}, "(" .. (now + ${ttl}), "+inf")`;

/**
 * Lua, after `luaPrune`: the prices of places no longer held (expired, given back) dropped, and
 * `pricedAbove` what the priced places but `except`'s cost above `unit` (nanodollars; `unit` nil:
 * 0), summed in whole nanodollars (exact in Lua's doubles up to 2^53, 9 million USD). A price that
 * is not a number Sluice writes is dropped too.
 */
const luaPricedAbove = (
  unit: string,
  except: string,
  key = "KEYS[1]",
  prices = "KEYS[2]",
) => `local pricedAbove = 0
if pricesKind == "hash" then
  local fields = redis.call("HGETALL", ${prices})
  for i = 1, #fields, 2 do
    local price = tonumber(fields[i + 1])
    if price == nil or not redis.call("ZSCORE", ${key}, fields[i]) then
      redis.call("HDEL", ${prices}, fields[i])
    elseif ${unit} ~= nil and fields[i] ~= ${except} and price > ${unit} then
      pricedAbove = pricedAbove + (price - ${unit})
    end
  end
end`;

/**
 * Lua: `full`, whether the places held (`count`) leave no room for one more: `room` of them (< 0: any
 * number), and with the figures (`unit`, `left`, nanodollars) the places at `unit` each and the
 * priced ones at their price (`pricedAbove`) not below `left`, as `roomUnderCap` decides the room.
 */
const luaFull = `local full = room >= 0 and count >= room
if not full and unit ~= nil and left ~= nil and pricedAbove > 0 and count * unit + pricedAbove >= left then
  full = true
end`;

/**
 * KEYS[1] the project's places, KEYS[2] their prices; ARGV[1] the room (the places there may be
 * before this one; < 0: any number), ARGV[2] this call's member, ARGV[3] a place's lifetime (ms),
 * ARGV[4] and ARGV[5] the figures (`InFlightFigures`: a place's figure and what the cap leaves, in
 * nanodollars; empty: none). The project's expired places pruned, the others counted (`luaFull`);
 * replies {taken (1 or 0), places held after, repaired (1 or 0)}. The key expires with its last
 * place.
 */
const takeScript = new RedisScript(`
local ttl = tonumber(ARGV[3])
${luaPrune("ttl")}
local unit = tonumber(ARGV[4])
local left = tonumber(ARGV[5])
${luaPricedAbove("unit", "ARGV[2]")}
local count = redis.call("ZCARD", KEYS[1])
local room = tonumber(ARGV[1])
${luaFull}
if full then return {0, count, repaired} end
redis.call("ZADD", KEYS[1], now + ttl, ARGV[2])
redis.call("PEXPIRE", KEYS[1], ttl)
return {1, count + 1, repaired}`);

/**
 * Lua, a `ScriptPart`: takeScript with the request's rate limits (`luaConsumeLimits`), over KEYS
 * after the first `keyOffset` and ARGV after the first `argOffset`: the project's places and their
 * prices and takeScript's ARGV[1..5] first, then the limits' keys and their ARGV pairs. No room:
 * `reply` is {0, places held, repaired}, and no limit is asked or counted. Else the limits decide:
 * admitted, the place is taken and the counts added, {1, places held after, repaired, ...the limits'
 * reply}; refused, neither, {2, places held, repaired, ...the limits' reply}. `admitted` is 1 only
 * when the place was taken.
 */
export function luaPlaceAndLimits(keyOffset: number, argOffset: number): string {
  const arg = (index: number) => `ARGV[${argOffset + index}]`;
  return `local placeKey = KEYS[${keyOffset + 1}]
local placePricesKey = KEYS[${keyOffset + 2}]
local ttl = tonumber(${arg(3)})
${luaPrune("ttl", "placeKey", "placePricesKey")}
local unit = tonumber(${arg(4)})
local left = tonumber(${arg(5)})
${luaPricedAbove("unit", arg(2), "placeKey", "placePricesKey")}
local count = redis.call("ZCARD", placeKey)
local room = tonumber(${arg(1)})
${luaFull}
local placeTaken = 0
local placeReply = {0, count, repaired}
if not full then
  ${luaConsumeLimits(keyOffset + 2, argOffset + 5)}
  placeReply = {2, count, repaired}
  if admitted == 1 then
    redis.call("ZADD", placeKey, now + ttl, ${arg(2)})
    redis.call("PEXPIRE", placeKey, ttl)
    placeTaken = 1
    placeReply = {1, count + 1, repaired}
  end
  for _, value in ipairs(reply) do placeReply[#placeReply + 1] = value end
end
local admitted, reply = placeTaken, placeReply`;
}

/** `luaPlaceAndLimits` as a script of its own (`takeWithLimits`): its reply is the part's. */
const takeWithLimitsScript = new RedisScript(`
${luaPlaceAndLimits(0, 0)}
return reply`);

/**
 * KEYS[1] the project's places, KEYS[2] their prices; ARGV[1] this call's member, ARGV[2] its price,
 * ARGV[3] a place's figure, ARGV[4] what the cap leaves above the month's spend (nanodollars, whole),
 * ARGV[5] a place's lifetime (ms). The other places at the figure each and the priced ones at their
 * price, and this one at its price, past what is left: replies {0, repaired}, nothing written. Else
 * its price is kept (until its place goes) and it replies {1, repaired}.
 */
const priceScript = new RedisScript(`
local ttl = tonumber(ARGV[5])
${luaPrune("ttl")}
local unit = tonumber(ARGV[3])
${luaPricedAbove("unit", "ARGV[1]")}
local others = redis.call("ZCARD", KEYS[1])
if redis.call("ZSCORE", KEYS[1], ARGV[1]) then others = others - 1 end
if others * unit + pricedAbove + tonumber(ARGV[2]) > tonumber(ARGV[4]) then return {0, repaired} end
redis.call("HSET", KEYS[2], ARGV[1], ARGV[2])
redis.call("PEXPIRE", KEYS[2], ttl)
return {1, repaired}`);

/**
 * KEYS[1] the project's places, KEYS[2] their prices; ARGV[1] a place's lifetime (ms), ARGV[2] how
 * many places follow to renew, ARGV[3] 1 to put back those no longer in the set (the first renewal
 * after a missed one, or after the client reconnected: they expired, or Redis lost them, while their
 * calls run), 0 to renew only those still there (`XX`: a renewal that reached Redis late, after the
 * place's removal, does not add it again); then each place to renew as its member and its price
 * (nanodollars, 0: none), kept again with it, then the members to remove (given back), their prices
 * too. The keys expire with the last place, and price.
 */
const renewScript = new RedisScript(`
local ttl = tonumber(ARGV[1])
${luaPrune("ttl")}
${luaPricedAbove("nil", "nil")}
local renewed = tonumber(ARGV[2])
local restore = ARGV[3] == "1"
for i = 4, 2 + 2 * renewed, 2 do
  if restore then
    redis.call("ZADD", KEYS[1], now + ttl, ARGV[i])
  else
    redis.call("ZADD", KEYS[1], "XX", now + ttl, ARGV[i])
  end
  if ARGV[i + 1] ~= "0" and redis.call("ZSCORE", KEYS[1], ARGV[i]) then
    redis.call("HSET", KEYS[2], ARGV[i], ARGV[i + 1])
  end
end
for i = 4 + 2 * renewed, #ARGV do
  redis.call("ZREM", KEYS[1], ARGV[i])
  redis.call("HDEL", KEYS[2], ARGV[i])
end
if redis.call("ZCARD", KEYS[1]) > 0 then redis.call("PEXPIRE", KEYS[1], ttl) end
if redis.call("HLEN", KEYS[2]) > 0 then redis.call("PEXPIRE", KEYS[2], ttl) end
return 1`);
