import type { IncomingHttpHeaders } from "node:http";
import { projectNotFound } from "../admin/project-id.js";
import { detachedString } from "../detached-string.js";
import { GatewayError } from "../errors.js";
import type { ProviderId } from "../providers/provider-id.js";
import { throttled } from "../rate-limit/auth-throttle.js";
import type { ScriptPart } from "../redis/redis-script.js";
import type { ReloadWait } from "../storage/database-unavailable.js";
import type { Project } from "../storage/project-repository.js";
import type { CredentialDirectory } from "./credential-directory.js";
import {
  bearerMismatch,
  bearerValue,
  bearerValueAsSent,
  headerTestKeyCacheKey,
  malformedBearer,
  single,
  splitBearer,
  swappedBearerHint,
  testKeyCacheKey,
  testKeyHeader,
  testModeOffInProduction,
  underscoreHeaderHint,
} from "./credential-headers.js";
import { decodedDeviceToken } from "./device-check-client.js";
import { clientShareMatches, parsePartialKey, rebuildProviderKey } from "./partial-key.js";
import { testKeyMatches } from "./test-key.js";

/** SPEC.md Authentication: the methods, in the order they are tried. */
export type AuthMethod =
  | "test-key-header"
  | "bearer-test-key"
  | "bearer-device-check"
  | "device-token-header";

export type DeviceVerdict =
  | {
      kind: "ok";
      digest: string;
      /**
       * Gives the token's use back to its ledger (see `DeviceTokenLedger.release`): for a request
       * refused after authentication (rate limits, spend cap), so a token counts admitted requests
       * only. Never rejects; at most once.
       */
      refund?: () => Promise<void>;
    }
  | { kind: "invalid"; reason: string }
  | {
      kind: "unavailable";
      retryAfterSeconds: number;
      reason: string;
      /** Apple was asked (it did not answer, or answered 429, 5xx or 401): the attempt cost a call. */
      askedApple?: boolean;
    }
  /** Apple was to be asked, and `beforeApple` refused (see `DeviceVerifyOptions`): nothing was counted. */
  | { kind: "throttled"; retryAfterSeconds: number }
  /**
   * Apple was to be asked, with no call for the token on its way, and the client had left
   * (`DeviceVerifyOptions.clientLeft`): Apple was not asked, nothing was verified.
   */
  | { kind: "client-left" };

/** What `recall` knows of a device token before its ledger is asked. */
export interface DeviceTokenRecall {
  /** The token's digest (the SHA-256 of its decoded bytes), for `verify` not to work it out again. */
  digest: string;
  /**
   * This instance passed the token for the project within its TTL (by its own clock), in budget
   * mode, under the project's current Apple settings: its ledger lookup almost always passes again.
   */
  passedHere: boolean;
}

export interface DeviceVerifyOptions {
  /** `recall`'s answer for this very token and project. */
  recalled?: DeviceTokenRecall;
  /**
   * For a request that holds no throttle slot (see `AuthThrottle.begin`): called once before Apple
   * is asked, it takes one; a number of seconds above 0 is its refusal, and the verdict is
   * `throttled`, Apple not asked.
   */
  beforeApple?: () => number;
  /**
   * What the caller decides once the token passed (admission's rate limits, a capped project's
   * place too), for a ledger in Redis to decide in the script of the token's lookup, one round trip
   * (`RedisDeviceTokenLedger.checkWith`): only when the lookup passes the token, its use then
   * counted only if the part admits the call (the verdict is `ok` either way, with a refund only for
   * a use counted). A ledger in memory, a lookup that does not pass and a script that fails leave
   * it undecided: the caller decides it itself, as without it.
   */
  beside?: ScriptPart<unknown> | undefined;
  /**
   * `beside` made again, for a token Apple passed: once Apple answered, what the caller decides next
   * is asked for anew (a capped project's room, the client still there) and, with a ledger in Redis,
   * decided in the script that remembers the token (`RedisDeviceTokenLedger.rememberWith`), its use
   * counted only if the part admits the call; undefined leaves `remember` alone, as does a ledger in
   * memory and a script that fails.
   */
  besideAfterApple?: () => ScriptPart<unknown> | undefined | Promise<ScriptPart<unknown> | undefined>;
  /**
   * Whether the request's client has left: asked once Apple is to be asked, after `beforeApple`.
   * True starts no call (the verdict is `client-left`); a call for the same token already on its way
   * for other requests is waited for all the same, as it costs nothing more.
   */
  clientLeft?: () => boolean;
}

export interface DeviceTokenVerifier {
  verify(project: Project, deviceToken: string, options?: DeviceVerifyOptions): Promise<DeviceVerdict>;
  /**
   * The token's digest and whether this instance passed it lately (`DeviceTokenRecall`), counting
   * nothing; null for a token that is not well-formed base64.
   */
  recall?(project: Project, deviceToken: string): DeviceTokenRecall | null;
  /**
   * `verify`'s `ok` without a promise, when its ledger is in memory and holds the token within its
   * budget (the use is counted); null otherwise, having counted nothing: ask `verify`. It is what
   * checks the token's form on the warm path: null for one that is not well-formed base64.
   */
  verifyNow?(project: Project, deviceToken: string): Extract<DeviceVerdict, { kind: "ok" }> | null;
}

export interface AuthThrottle {
  /** The throttle's own limit, reported in the RateLimit headers of its 429. */
  readonly policy: { failuresPerWindow: number; windowSeconds: number };
  /** Seconds until the caller may try again; 0 when not throttled. A number when known at once. */
  retryAfter(clientIp: string, projectId: string | undefined): number | Promise<number>;
  /**
   * As `retryAfter`, for an id just found to name no project: the failures counted for the id
   * across addresses refuse its callers only while it names none (a project created under it is
   * not refused for them).
   */
  retryAfterMissing(projectId: string): number | Promise<number>;
  recordFailure(clientIp: string, projectId: string | undefined, projectExists: boolean): Promise<void>;
  /**
   * Admits an attempt that may fail (a lookup of a project not known to exist, a secret comparison,
   * an Apple call): a function to call once it ended, after any failure was recorded; or, while the
   * failures and the attempts in flight on its key reach the limit, the seconds to wait (a 429).
   * `projectId`: the address's key for a project that exists; undefined: the address's own key.
   */
  begin(clientIp: string, projectId: string | undefined): (() => void) | number;
}

/**
 * A request to authenticate. It is also the request's wait for stale cached records (ReloadWait),
 * shared with what it reads after authentication (the month's spend): `reloadWaitMs` in all.
 */
export interface AuthRequest extends ReloadWait {
  /** From the path (takes precedence) or the x-project-id header; the caller resolves which. */
  projectId: string | undefined;
  headers: IncomingHttpHeaders;
  clientIp: string;
  /** The provider whose key the endpoint needs, known up front (proxies) or from the project. */
  provider: ProviderId | ((project: Project) => ProviderId);
  /** Proxies also take `<partial>.<token>` in the header their provider's SDK sends its key in. */
  sdkKeyHeader?: "x-api-key" | "x-goog-api-key";
  /**
   * A refusal decided from the headers before any credential is read (a credential header or
   * `x-project-id` sent more than once, 400): answered as it is, but counted as a failed
   * authentication on the keys a wrong credential for `projectId` counts against, so that once over
   * the throttle the client gets its 429 (with no usage row) instead. Without a project id it is
   * answered without counting: such a request has no row to write.
   */
  refusal?: GatewayError;
  /**
   * What admission decides next, for a device token's ledger lookup to decide in the same round
   * trip (`DeviceVerifyOptions.beside`): asked for with the project, the provider and the token's
   * digest once that lookup is all that is left to decide (the DeviceCheck method alone, its partial
   * key rebuilt and passing, the project enabled); undefined leaves the lookup alone. Admission
   * finds out what was decided through the part's own `decide`.
   */
  beside?: (
    project: Project,
    provider: ProviderId,
    deviceDigest: string,
  ) => ScriptPart<unknown> | undefined | Promise<ScriptPart<unknown> | undefined>;
  /**
   * Whether the request's client has left (its connection closed): a device token Apple would be
   * asked about is then asked of no one (`DeviceVerifyOptions.clientLeft`), and the attempt fails,
   * counted as a failed authentication. Undefined: never.
   */
  clientLeft?: () => boolean;
}

export type AuthResult =
  | {
      ok: true;
      method: AuthMethod;
      project: Project;
      keyId: string;
      provider: ProviderId;
      /** The rebuilt provider key: in memory only, never logged, never echoed. */
      providerKey: string;
      /** SHA-256 of the device token for per-device limits; null for test keys. */
      deviceDigest: string | null;
      /**
       * DeviceCheck methods: gives back the use authentication counted on the token (its project,
       * digest and ledger entry), for admission to call when it refuses the request. Absent for
       * test keys (and their remembered results).
       */
      refundDeviceToken?: () => Promise<void>;
      /**
       * The directory's generation read before the records this success was worked out from were
       * read, and when the oldest of them was read (`CredentialDirectory.readAt`): never later than
       * any of the records the credentials were checked against, though a reload may have answered
       * since (see `readBefore` in `authenticateFully`). What admission's recheck starts from.
       */
      generation: number;
      readAt: number;
    }
  | { ok: false; error: GatewayError; project: Project | null; method: AuthMethod | null };

export interface AuthenticatorDeps {
  directory: CredentialDirectory;
  deviceTokens: DeviceTokenVerifier;
  throttle: AuthThrottle;
  /**
   * False in production: SPEC rule 4 keeps Test Mode to development and testing, so no test key
   * authenticates there, whatever a project's testMode says (methods 1 and 2a).
   */
  testModeAllowed: boolean;
}

const base64Token = /^[A-Za-z0-9+/]+={0,2}$/;
const maxCredentialLength = 8192;

export function createAuthenticator(deps: AuthenticatorDeps) {
  const { directory } = deps;

  /**
   * Entries live as long as the directory's records they were worked out from
   * (`SLUICE_PROJECT_CACHE_TTL_MS` from the moment the oldest was read, `readAt`) and die with any
   * admin change (the directory's generation moves). `set` takes the generation read before the
   * value was worked out: a value learned across a change (a key record read just before its
   * revocation) is not remembered.
   */
  function directoryBoundCache<T>() {
    const entries = new Map<string, { at: number; generation: number; value: T }>();
    return {
      get(key: string): T | undefined {
        const hit = entries.get(key);
        if (!hit || hit.generation !== directory.generation() || directory.now() - hit.at >= directory.ttlMs)
          return undefined;
        return hit.value;
      },
      /**
       * Whether `key` was worked out from the records as they stand (no admin change since), however
       * long ago: its records may be due to be read again, but the credential passed against them.
       */
      known(key: string): boolean {
        return entries.get(key)?.generation === directory.generation();
      },
      set(key: string, value: T, generation: number, readAt: number): void {
        if (generation !== directory.generation()) return;
        if (entries.size >= 10_000) entries.clear();
        // A copy: the key is joined from parts of the request's headers (a partial key cut from an
        // Authorization header that carries a DeviceCheck token of up to 8 KiB), which a joined
        // string, kept as a Map's key, would hold whole.
        entries.set(detachedString(key), { at: readAt, generation, value });
      },
    };
  }

  /**
   * Test-key credentials that verified recently, so a client sending the same credentials again
   * skips the digests and the key rebuild. DeviceCheck tokens are not cached here: their ledger
   * counts every use.
   */
  const verified = directoryBoundCache<Extract<AuthResult, { ok: true }>>();

  /**
   * Partial keys that matched and were rebuilt recently, for the DeviceCheck methods (whose
   * results cannot be cached whole): the device token is still verified on every request, the
   * digest check and the key rebuild are not repeated.
   */
  const rebuilt = directoryBoundCache<RebuiltKey>();

  function cachedSuccess(key: string | null, project: Project): AuthResult | null {
    const hit = key === null ? undefined : verified.get(key);
    return hit ? { ...hit, project } : null;
  }

  /** A test-key success, remembered for as long as the records it was worked out from (its `readAt`). */
  function remember(keys: VerifiedKeys, result: AuthResult): void {
    if (!result.ok) return;
    // Under the key of the method that passed it, which holds exactly what that method read.
    const key =
      result.method === "test-key-header"
        ? keys.header
        : result.method === "bearer-test-key"
          ? keys.bearer
          : null;
    if (key === null) return;
    verified.set(key, result, result.generation, result.readAt);
  }

  /** Checks the partial key against the project's key records and rebuilds the provider key. */
  async function rebuildKey(
    project: Project,
    partialKey: string,
    provider: ProviderId,
    wait: ReloadWait,
  ): Promise<RebuiltKey | GatewayError> {
    const cacheKey = rebuiltKeyOf(project.id, provider, partialKey);
    const hit = rebuilt.get(cacheKey);
    if (hit) return hit;
    const generation = directory.generation();
    const parsed = parsePartialKey(partialKey);
    if (!parsed) return unauthorized("the partial key is malformed");
    const key = await directory.key(parsed.keyId, wait);
    if (!key || key.record.projectId !== project.id) {
      return unauthorized("the partial key is not valid for this project");
    }
    if (!clientShareMatches(parsed.clientShare, key.record.clientShareDigest)) {
      return unauthorized("the partial key is not valid for this project");
    }
    // Revocation keeps the record: a caller holding this very partial key is told why it stopped
    // working, as a 403 the methods give only once the token passed too (see viaDeviceCheck).
    if (key.record.revokedAt !== null) {
      return new GatewayError("FORBIDDEN", "This provider key was revoked");
    }
    if (key.record.provider !== provider) {
      return new GatewayError(
        "FORBIDDEN",
        `This partial key belongs to ${key.record.provider}; this endpoint needs a ${provider} key`,
      );
    }
    // Decrypted only now: a client share that does not match the digest never gets this far.
    const providerKey = rebuildProviderKey(key.serverShare(), parsed.clientShare);
    if (providerKey === null) return unauthorized("the partial key is not valid for this project");
    // Kept (see `set`): the key id is a copy, not a view of the Authorization header it was cut from.
    // Taken as the key record's read answers: a reload of it that answers later (past the request's
    // wait, while Apple is asked) is not counted. The project's and the test keys' may be later than
    // those checked, which the full path's `readBefore` makes up for.
    const readAt = directory.readAt(project.id, parsed.keyId);
    const rebuiltKey = { keyId: detachedString(parsed.keyId), providerKey, readAt };
    rebuilt.set(cacheKey, rebuiltKey, generation, readAt);
    return rebuiltKey;
  }

  /**
   * A result without a promise when everything it needs is in memory (the throttle's answer, the
   * project, a recently verified test-key credential, or a partial key rebuilt recently with a
   * device token the in-memory ledger holds): the path almost every request takes. The answer is
   * the same as the full path's; only the waiting is skipped.
   */
  return function authenticate(request: AuthRequest): AuthResult | Promise<AuthResult> {
    const retryAfter = deps.throttle.retryAfter(request.clientIp, request.projectId);
    if (retryAfter !== 0 || request.refusal !== undefined) return authenticateFully(request, retryAfter);
    const project = request.projectId ? directory.settledProject(request.projectId) : undefined;
    return (
      (project &&
        !project.disabled &&
        (recentTestKeySuccess(request, project) || recentDeviceCheckSuccess(request, project))) ||
      authenticateFully(request, retryAfter)
    );
  };

  /** `verifiedKeysFor`'s two lookups, the way the warm path takes them: no object built. */
  function recentTestKeySuccess(request: AuthRequest, project: Project): AuthResult | null {
    if (!testModeOn(project)) return null;
    const { headers } = request;
    const provider = providerFor(request, project);
    const headerKey = single(headers[testKeyHeader]);
    return (
      (headerKey !== undefined &&
        cachedSuccess(headerTestKeyCacheKey(project.id, provider, headerKey, headers), project)) ||
      cachedSuccess(testKeyCacheKey(project.id, provider, headerKey, headers, request.sdkKeyHeader), project)
    );
  }

  /**
   * Method 2b as `tryMethods` takes it, when it cannot wait: no test-key header (method 1 comes
   * first), Test Mode off (so the Bearer token is not a test key), the partial key rebuilt recently
   * for this project and provider, and the device token passed by the in-memory ledger (which
   * counts the use). Anything else, a refusal included, is the full path's to decide.
   */
  function recentDeviceCheckSuccess(request: AuthRequest, project: Project): AuthResult | null {
    const { headers } = request;
    if (!project.deviceCheck.enabled || testModeOn(project) || headers[testKeyHeader] !== undefined)
      return null;
    const bearer = bearerValueAsSent(headers, request.sdkKeyHeader);
    if (bearer === undefined) return null;
    // The token is checked by verifyNow, in the pass that decodes it for its digest.
    const { partialKey, token } = splitBearer(bearer);
    if (!partialKey || token.length > maxCredentialLength) return null;
    const provider = providerFor(request, project);
    const key = rebuilt.get(rebuiltKeyOf(project.id, provider, partialKey));
    const verdict = key && deps.deviceTokens.verifyNow?.(project, token);
    if (!key || !verdict) return null;
    // The project as it stands was read no earlier than the one the key was rebuilt under (no admin
    // change since): the key's read time is the success's.
    const generation = directory.generation();
    return success("bearer-device-check", project, provider, key, generation, verdict.digest, verdict.refund);
  }

  /**
   * The DeviceCheck method a request can take when it is the only one: no test-key header (method
   * 1), Test Mode off (so the Bearer token is not a test key), DeviceCheck on, and either a Bearer
   * value (or the SDK key header) without `x-device-token` (method 2b, method 3 not tried after it)
   * or `x-device-token` with `x-ai-key` and no Bearer value (method 3 alone); with a partial key this
   * instance rebuilt under the records as they stand (its records may be due to be read again) and
   * a well-formed token, recalled by the verifier (its digest, and whether it passed here).
   * `tryMethods` would answer such a request as `viaDeviceCheck` does; anything else is its to
   * decide. The Bearer value is read as the warm path reads it (`bearerValueAsSent`): what the
   * strict reading would trim or refuse matches no partial key rebuilt or well-formed token.
   */
  function deviceCheckAlone(
    request: AuthRequest,
    project: Project,
    provider: ProviderId,
  ): { method: AuthMethod; partialKey: string; token: string; recalled: DeviceTokenRecall } | null {
    const { headers } = request;
    if (!project.deviceCheck.enabled || testModeOn(project) || headers[testKeyHeader] !== undefined)
      return null;
    const bearer = bearerValueAsSent(headers, request.sdkKeyHeader);
    const legacyToken = single(headers["x-device-token"]);
    let method: AuthMethod = "bearer-device-check";
    let partialKey: string | undefined;
    let token: string | undefined;
    if (bearer !== undefined) {
      if (legacyToken !== undefined) return null;
      ({ partialKey, token } = splitBearer(bearer));
    } else {
      method = "device-token-header";
      partialKey = single(headers["x-ai-key"]);
      token = legacyToken;
    }
    if (!partialKey || token === undefined || token.length > maxCredentialLength) return null;
    if (!rebuilt.known(rebuiltKeyOf(project.id, provider, partialKey))) return null;
    const recalled = deps.deviceTokens.recall?.(project, token);
    return recalled ? { method, partialKey, token, recalled } : null;
  }

  /** Whether the project's test keys authenticate: its Test Mode is on, and this is not production. */
  function testModeOn(project: Project): boolean {
    return project.testMode && deps.testModeAllowed;
  }

  /**
   * Where a verified test-key credential is remembered, by the method that passed it: method 1's key
   * (the test-key header and x-ai-key, `headerTestKeyCacheKey`) and method 2a's (the Bearer value,
   * with what method 1 read before it, `testKeyCacheKey`); null for a method the request cannot take,
   * both when the project is not in test mode. Method 1 comes first: its key is looked up first.
   */
  function verifiedKeysFor(request: AuthRequest, project: Project, provider: ProviderId): VerifiedKeys {
    if (!testModeOn(project)) return { header: null, bearer: null };
    const { headers } = request;
    const headerKey = single(headers[testKeyHeader]);
    return {
      header:
        headerKey === undefined ? null : headerTestKeyCacheKey(project.id, provider, headerKey, headers),
      bearer: testKeyCacheKey(project.id, provider, headerKey, headers, request.sdkKeyHeader),
    };
  }

  /** Whether a test-key credential under one of `keys` passed against the records as they stand. */
  function knownTestKeyCredential(keys: VerifiedKeys): boolean {
    return (
      (keys.header !== null && verified.known(keys.header)) ||
      (keys.bearer !== null && verified.known(keys.bearer))
    );
  }

  /** The refusal of a caller the failure throttle holds back for `retryAfter` seconds. */
  function throttledFailure(retryAfter: number): AuthResult {
    const message = "Too many failed authentication attempts; try again later";
    return failure(throttled(deps.throttle, retryAfter, "auth-failures", message), null);
  }

  async function authenticateFully(
    request: AuthRequest,
    pendingRetryAfter: number | Promise<number>,
  ): Promise<AuthResult> {
    const { headers, clientIp } = request;
    const projectId = request.projectId;
    const generation = directory.generation();
    const wait: ReloadWait = request;
    const retryAfter = await pendingRetryAfter;
    if (retryAfter > 0) return throttledFailure(retryAfter);
    if (request.refusal !== undefined) {
      return projectId
        ? countedRefusal(request.refusal, projectId, clientIp, wait)
        : failure(request.refusal, null);
    }
    // The project id is the first of the three things every method needs (SPEC): without it no
    // method can succeed, which SPEC answers with 401.
    if (!projectId) {
      return failure(
        new GatewayError(
          "UNAUTHORIZED",
          "A project id is required: put it in the path or the x-project-id header",
        ),
        null,
      );
    }
    // When the records a success is worked out from were read, as they stand before any is read
    // again. A record due to be read again is served as it was while its reload is on its way
    // (`reloadWaitMs` at most), and that reload may answer before the attempt ends (while it reads a
    // key record for the first time, or asks Apple): the time after would then be the reload's,
    // though the credential was checked against the record it replaced, perhaps one that still held
    // a test key revoked meanwhile.
    const readBefore = directory.readAt(projectId, null);
    // Each attempt that may fail holds a throttle slot until its failure is counted (see
    // AuthThrottle.begin): the lookup of an id not known to be a project, on the address; the
    // methods, on the address and project. A remembered success needs none.
    const found = await throttledProject(projectId, clientIp, wait);
    if ("answer" in found) return found.answer;
    const { project } = found;
    let release: (() => void) | undefined;
    try {
      const provider = providerFor(request, project);
      const cacheKeys = verifiedKeysFor(request, project, provider);
      const hit = cachedSuccess(cacheKeys.header, project) ?? cachedSuccess(cacheKeys.bearer, project);
      const spent = { failure: false };
      let attempt: AuthResult;
      if (hit) attempt = hit;
      else {
        const device = deviceCheckAlone(request, project, provider);
        // A test-key credential verified before, whose records are being read again (every TTL), is
        // checked without a slot: a busy client's burst at that moment is no burst of guesses. So is
        // a device token this instance passed, with a partial key it rebuilt: only its ledger lookup
        // is left, which counts a failure once it ends (a budget used up); Apple is asked only
        // through a slot taken then (`beforeApple`).
        const slotFree = device ? device.recalled.passedHere : knownTestKeyCredential(cacheKeys);
        if (!slotFree) {
          const slot = deps.throttle.begin(clientIp, projectId);
          if (typeof slot === "number") return tooManyAttempts(slot);
          release = slot;
        }
        if (device) {
          const options: DeviceVerifyOptions = { recalled: device.recalled };
          if (request.clientLeft) options.clientLeft = request.clientLeft;
          if (slotFree)
            options.beforeApple = () => {
              const slot = deps.throttle.begin(clientIp, projectId);
              if (typeof slot === "number") return slot;
              release = slot;
              return 0;
            };
          const { method, partialKey, token } = device;
          attempt = await viaDeviceCheck(
            project,
            provider,
            partialKey,
            token,
            method,
            spent,
            wait,
            options,
            request.beside,
          );
        } else
          attempt = await tryMethods(
            project,
            provider,
            headers,
            request.sdkKeyHeader,
            spent,
            wait,
            request.clientLeft,
          );
        if (attempt.ok) {
          // Worked out from the records as they stood from `generation` and `readBefore` on.
          attempt.generation = generation;
          if (readBefore < attempt.readAt) attempt.readAt = readBefore;
        }
        // A hit is not written back: that would restart its time and outlive the records behind it.
        remember(cacheKeys, attempt);
      }
      if (!attempt.ok) {
        // An Apple call that did not authenticate counts whatever Apple answered: while Apple
        // throttles the project's key (429), junk tokens must not keep it throttled for free. So
        // does a refused device token when another method's 403 is the answer: a passing
        // credential of another provider must not make junk tokens' Apple calls free either.
        if (attempt.error.status === 401 || spent.failure)
          await deps.throttle.recordFailure(clientIp, projectId, true);
        return attempt;
      }
      // Said only to a caller whose credentials passed: anyone else gets 401 and learns nothing of
      // the project's state.
      if (project.disabled) {
        // Not admitted: a device token's use is given back, as for any refusal after it passed.
        await attempt.refundDeviceToken?.();
        return failure(new GatewayError("FORBIDDEN", "This project is disabled"), project, attempt.method);
      }
      return attempt;
    } finally {
      release?.();
    }
  }

  /**
   * A refusal decided before the credentials are read (AuthRequest.refusal), counted as a wrong
   * credential would be: on the address and project for a project that exists, on the address and
   * the id for one that does not (so fresh made-up ids do not reset the count), each holding a slot
   * until it is counted, so a burst is held to the limit too. The answer is the refusal either way:
   * it says nothing of whether the project exists.
   */
  async function countedRefusal(
    refusal: GatewayError,
    projectId: string,
    clientIp: string,
    wait: ReloadWait,
  ): Promise<AuthResult> {
    const found = await throttledProject(projectId, clientIp, wait, refusal);
    if ("answer" in found) return found.answer;
    const slot = deps.throttle.begin(clientIp, projectId);
    if (typeof slot === "number") return tooManyAttempts(slot);
    try {
      await deps.throttle.recordFailure(clientIp, projectId, true);
      return failure(refusal, found.project);
    } finally {
      slot();
    }
  }

  /**
   * The project `projectId` names, looked up as an attempt that may fail (see AuthThrottle.begin):
   * an id not known to be a project holds a slot on the address until the lookup ended; one that
   * names no project is counted there as a failure and answered with `refusal`, by default
   * PROJECT_NOT_FOUND.
   */
  async function throttledProject(
    projectId: string,
    clientIp: string,
    wait: ReloadWait,
    refusal?: GatewayError,
  ): Promise<{ project: Project } | { answer: AuthResult }> {
    let release: (() => void) | undefined;
    try {
      if (!directory.holdsProject(projectId)) {
        const slot = deps.throttle.begin(clientIp, undefined);
        if (typeof slot === "number") return { answer: tooManyAttempts(slot) };
        release = slot;
      }
      const project = await directory.project(projectId, wait);
      if (project) return { project };
      const retryAfter = await deps.throttle.retryAfterMissing(projectId);
      if (retryAfter > 0) return { answer: throttledFailure(retryAfter) };
      await deps.throttle.recordFailure(clientIp, projectId, false);
      const missing = refusal ?? projectNotFound(projectId);
      return { answer: failure(missing, null) };
    } finally {
      release?.();
    }
  }

  /** The throttle's refusal of an attempt while its key's failures and attempts in flight fill it. */
  function tooManyAttempts(retryAfter: number): AuthResult {
    const message = "Too many failed or pending authentication attempts; try again later";
    return failure(throttled(deps.throttle, retryAfter, "auth-failures", message), null);
  }

  async function tryMethods(
    project: Project,
    provider: ProviderId,
    headers: IncomingHttpHeaders,
    sdkKeyHeader: AuthRequest["sdkKeyHeader"],
    /**
     * Set when a device token failed in a way that counts whatever the answer: refused (by Apple or
     * its ledger), or an Apple call that did not authenticate (see viaDeviceCheck).
     */
    spent: { failure: boolean },
    wait: ReloadWait,
    clientLeft: AuthRequest["clientLeft"],
  ): Promise<AuthResult> {
    const deviceOptions = clientLeft ? { clientLeft } : undefined;
    let best: { error: GatewayError; method: AuthMethod | null } | null = null;
    const note = (error: GatewayError, method: AuthMethod) => {
      // A failure further along (right token, wrong key) explains more than an early mismatch.
      if (!best || best.method === null || error.status !== 401) best = { error, method };
    };
    const aiKey = single(headers["x-ai-key"]);

    // 1. Test key header, partial key from x-ai-key.
    const headerTestKey = single(headers[testKeyHeader]);
    if (headerTestKey !== undefined) {
      // Production refuses every test key alike, before any comparison: the answer says nothing of
      // whether the key was right.
      if (!deps.testModeAllowed) note(unauthorized(testModeOffInProduction), "test-key-header");
      else if (!project.testMode) note(unauthorized("test mode is off for this project"), "test-key-header");
      else if (!(await matchesTestKey(project, headerTestKey, wait)))
        note(unauthorized("the test key does not match"), "test-key-header");
      else if (!aiKey)
        note(
          unauthorized(
            `x-ai-key (the partial key) is required with the test-key header${underscoreHeaderHint(headers)}`,
          ),
          "test-key-header",
        );
      else {
        const key = await rebuildKey(project, aiKey, provider, wait);
        if (!(key instanceof GatewayError))
          return success("test-key-header", project, provider, key, stampedLater, null);
        note(key, "test-key-header");
      }
    }

    // 2. Bearer <partial_key>.<token> (or the provider SDK's key header); x-ai-key is ignored.
    const bearer = bearerValue(headers, sdkKeyHeader);
    if (bearer !== undefined) {
      const { partialKey, token } = splitBearer(bearer);
      if (!partialKey || !token)
        note(unauthorized(malformedBearer(headers.authorization)), "bearer-test-key");
      else if (testModeOn(project) && (await matchesTestKey(project, token, wait))) {
        const key = await rebuildKey(project, partialKey, provider, wait);
        if (!(key instanceof GatewayError))
          return success("bearer-test-key", project, provider, key, stampedLater, null);
        note(key, "bearer-test-key");
      } else if (project.deviceCheck.enabled && isBase64Token(token)) {
        const result = await viaDeviceCheck(
          project,
          provider,
          partialKey,
          token,
          "bearer-device-check",
          spent,
          wait,
          deviceOptions,
        );
        // A refusal once the token passed (403: a revoked key, another provider's) is this method
        // failing, as it is after a test key: method 3 still gets its turn. A 503 (Apple or the
        // token ledger cannot decide) is answered at once: method 3 would ask the same ones.
        if (result.ok || result.error.status >= 500) return result;
        note(result.error, "bearer-device-check");
      } else {
        note(
          unauthorized(bearerMismatch(project, deps.testModeAllowed) + swappedBearerHint(token)),
          "bearer-test-key",
        );
      }
    }

    // 3. Legacy x-device-token header, partial key from x-ai-key.
    const deviceToken = single(headers["x-device-token"]);
    if (deviceToken !== undefined) {
      if (!project.deviceCheck.enabled)
        note(unauthorized("device check is off for this project"), "device-token-header");
      else if (!aiKey)
        note(
          unauthorized(
            `x-ai-key (the partial key) is required with x-device-token${underscoreHeaderHint(headers)}`,
          ),
          "device-token-header",
        );
      else if (!isBase64Token(deviceToken))
        note(unauthorized("the device token is not base64"), "device-token-header");
      else {
        const result = await viaDeviceCheck(
          project,
          provider,
          aiKey,
          deviceToken,
          "device-token-header",
          spent,
          wait,
          deviceOptions,
        );
        if (result.ok || result.error.status !== 401) return result;
        note(result.error, "device-token-header");
      }
    }

    const chosen = best as { error: GatewayError; method: AuthMethod | null } | null;
    return failure(
      chosen?.error ?? unauthorized(`no credentials were sent${underscoreHeaderHint(headers)}`),
      project,
      chosen?.method ?? null,
    );
  }

  /**
   * The partial key is checked first, so a wrong key never costs a call to Apple. A key of another
   * provider or a revoked key (403) is said only once the device token passed, as with a test key:
   * 403 means "authenticated, but not allowed", and a caller holding only a partial key gets 401.
   */
  async function viaDeviceCheck(
    project: Project,
    provider: ProviderId,
    partialKey: string,
    deviceToken: string,
    method: AuthMethod,
    spent: { failure: boolean },
    wait: ReloadWait,
    options?: DeviceVerifyOptions,
    beside?: AuthRequest["beside"],
  ): Promise<AuthResult> {
    if (deviceToken.length > maxCredentialLength)
      return failure(unauthorized("the device token is too long"), project, method);
    const key = await rebuildKey(project, partialKey, provider, wait);
    if (key instanceof GatewayError && key.status === 401) return failure(key, project, method);
    // Only the lookup is left to decide (a passing token is then a success): what admission decides
    // next can go in its script. Not with a key that refuses (403 once the token passed) or a
    // disabled project: those calls are refused whatever the lookup says.
    if (beside && options?.recalled && !(key instanceof GatewayError) && !project.disabled) {
      const { digest } = options.recalled;
      options.beside = await beside(project, provider, digest);
      // And what it decides after Apple's answer, for a token the lookup does not pass.
      options.besideAfterApple = () => beside(project, provider, digest);
    }
    const verdict = await deps.deviceTokens.verify(project, deviceToken, options);
    if (verdict.kind === "throttled") return tooManyAttempts(verdict.retryAfterSeconds);
    if (verdict.kind === "ok") {
      if (!(key instanceof GatewayError))
        return success(method, project, provider, key, stampedLater, verdict.digest, verdict.refund);
      // A revoked key or another provider's (403): not admitted, so the token's use is given back.
      await verdict.refund?.();
      return failure(key, project, method);
    }
    if (verdict.kind === "invalid") {
      spent.failure = true;
      return failure(unauthorized(`the device token was refused: ${verdict.reason}`), project, method);
    }
    // Nothing verified, and no one to answer: counted as a failure all the same, as a made-up token's
    // Apple call would be, or a connect-send-leave flood would write a usage row per request,
    // as fast as it sends, held to no limit.
    if (verdict.kind === "client-left") {
      spent.failure = true;
      return failure(unauthorized("the client left before its device token was verified"), project, method);
    }
    if (verdict.askedApple) spent.failure = true;
    return failure(
      new GatewayError("SERVICE_UNAVAILABLE", "Device verification is unavailable right now; retry shortly", {
        headers: { "retry-after": String(verdict.retryAfterSeconds) },
        details: { retryable: true },
      }),
      project,
      method,
    );
  }

  async function matchesTestKey(project: Project, candidate: string, wait: ReloadWait): Promise<boolean> {
    if (candidate.length === 0 || candidate.length > maxCredentialLength) return false;
    return testKeyMatches(candidate, await directory.testKeyDigests(project.id, wait));
  }
}

export type Authenticate = ReturnType<typeof createAuthenticator>;

/**
 * `generation`, and the key's read time as the success's: the full path sets both to what it read
 * before the records (`authenticateFully`).
 */
function success(
  method: AuthMethod,
  project: Project,
  provider: ProviderId,
  key: RebuiltKey,
  generation: number,
  deviceDigest: string | null,
  refundDeviceToken?: () => Promise<void>,
): Extract<AuthResult, { ok: true }> {
  return {
    ok: true,
    method,
    project,
    provider,
    keyId: key.keyId,
    providerKey: key.providerKey,
    deviceDigest,
    ...(refundDeviceToken ? { refundDeviceToken } : {}),
    generation,
    readAt: key.readAt,
  };
}

/**
 * The generation of a success of the full path until `authenticateFully` sets the one it read before
 * the records: none the directory has (they count up from 0), so a success left so is checked again
 * in full by admission's recheck.
 */
const stampedLater = -1;

/** A partial key checked against its record and rebuilt, with when its records were read (`readAt`). */
interface RebuiltKey {
  keyId: string;
  providerKey: string;
  readAt: number;
}

function failure(error: GatewayError, project: Project | null, method: AuthMethod | null = null): AuthResult {
  return { ok: false, error, project, method };
}

export function unauthorized(reason: string): GatewayError {
  return new GatewayError("UNAUTHORIZED", `No authentication method succeeded: ${reason}`);
}

/**
 * Whether a token is base64 (`base64Token`). A well-formed device token, the usual case, is told
 * by `decodedDeviceToken` (a pass of the base64 decoder) instead of the regular expression, which
 * costs ~15 instructions a character of a token of a few KiB: the full path runs on every
 * request when the token ledger is in Redis.
 */
function isBase64Token(token: string): boolean {
  return decodedDeviceToken(token) !== null || base64Token.test(token);
}

/** Where a partial key rebuilt for a project and provider is remembered. */
function rebuiltKeyOf(projectId: string, provider: ProviderId, partialKey: string): string {
  return `${projectId}\u0000${provider}\u0000${partialKey}`;
}

/** Where a test-key success is remembered, for each test-key method (see `verifiedKeysFor`). */
interface VerifiedKeys {
  header: string | null;
  bearer: string | null;
}

/** The provider whose key the endpoint needs: named by the route, or chosen by the project. */
function providerFor(request: AuthRequest, project: Project): ProviderId {
  return typeof request.provider === "function" ? request.provider(project) : request.provider;
}
