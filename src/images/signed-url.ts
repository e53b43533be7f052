import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * HMAC-SHA256 signed, expiring URLs for the local vault:
 * `<base>/v1/vault/<path>?expires=<unix seconds>&issued=<unix seconds>&signature=<base64url hmac>`,
 * the HMAC over `path \n expires \n issued` under a key derived from `key`. A URL is good through the millisecond its expiry names,
 * and refused from the next. `previousKey` (during a master key rotation) verifies the URLs signed
 * before it, which are still handed out.
 *
 * With `maxTtlSeconds` (SLUICE_VAULT_URL_TTL_SECONDS), a URL lives that long at most from when it
 * was signed (`issued`), whatever TTL it was signed with: lowering the TTL (a URL shared too widely)
 * shortens the URLs already handed out too, rather than only those signed from then on, while it stays
 * lowered (raised again, a URL not past its own `expires` is answered again: nothing is stored). A
 * URL without `issued` (signed before it was added, `path \n expires` signed) is refused while its
 * expiry lies further ahead than a URL signed now would get, the most that can be told of it.
 */
export function createUrlSigner(
  key: Buffer,
  now: () => number = Date.now,
  previousKey?: Buffer,
  maxTtlSeconds?: number,
) {
  const signWith = (signingKey: Buffer, message: string) =>
    createHmac("sha256", signingKey).update(message).digest("base64url");
  // URLs with `issued` are signed under keys of their own: a message of theirs is never one of a URL
  // without it (`path \n expires`, whose path, decoded from the URL, could hold a newline).
  const withIssued = (signingKey: Buffer) =>
    createHmac("sha256", signingKey).update("vault-url-issued").digest();
  const issuedKey = withIssued(key);
  const previousIssuedKey = previousKey && withIssued(previousKey);
  const matches = (signingKey: Buffer, message: string, signature: string) => {
    const expected = Buffer.from(signWith(signingKey, message));
    const actual = Buffer.from(signature);
    return expected.length === actual.length && timingSafeEqual(expected, actual);
  };
  /** A whole number of seconds exactly as signed (decimal digits), or null. */
  const secondsOf = (text: string | null) => (text && /^[1-9][0-9]{0,14}$/.test(text) ? Number(text) : null);
  /**
   * The last second a signed URL is good through: its expiry, or its signing second plus the TTL
   * in force when that comes first. A URL without `issued`: its expiry, or none (0) while the expiry
   * lies further ahead than the TTL in force allows from now.
   */
  const lastSecond = (expires: number, issued: number | null, at: number) => {
    if (maxTtlSeconds === undefined) return expires;
    if (issued !== null) return Math.min(expires, issued + maxTtlSeconds);
    // The latest expiry `sign` gives now: its TTL from the second it rounds up to.
    return expires > Math.ceil(at / 1000) + maxTtlSeconds ? 0 : expires;
  };
  return {
    sign(baseUrl: string, path: string, ttlSeconds: number): string {
      // Rounded up to the second it names: the URL lives its TTL at least, a second more at most.
      // Rounded down, one signed late in a second lived up to a second less (with a TTL of 1, a
      // millisecond).
      const issued = Math.ceil(now() / 1000);
      const expires = issued + ttlSeconds;
      const signature = signWith(issuedKey, `${path}\n${expires}\n${issued}`);
      return `${baseUrl.replace(/\/+$/, "")}/v1/vault/${path}?expires=${expires}&issued=${issued}&signature=${signature}`;
    },
    /**
     * "ok", or why the URL is refused; with "ok", the last second (unix) it is good through, which
     * no cached copy may outlive. `query`: the URL's parameters (`expires`, `issued`, `signature`).
     */
    verify(
      path: string,
      query: URLSearchParams,
    ): { verdict: "ok"; lastSecond: number } | { verdict: "expired" | "invalid" } {
      // The expiry and signing second exactly as signed (decimal digits): another notation of the
      // same number (`0x…`, `+…`, `….0`) is a tampered URL, refused as one.
      const expires = secondsOf(query.get("expires"));
      const issuedText = query.get("issued");
      const issued = issuedText === null ? null : secondsOf(issuedText);
      const signature = query.get("signature");
      if (expires === null || !signature || (issuedText !== null && issued === null))
        return { verdict: "invalid" };
      const [current, previous, message] =
        issued === null
          ? [key, previousKey, `${path}\n${expires}`]
          : [issuedKey, previousIssuedKey, `${path}\n${expires}\n${issued}`];
      const signed =
        matches(current, message, signature) ||
        (previous !== undefined && matches(previous, message, signature));
      if (!signed) return { verdict: "invalid" };
      const at = now();
      const last = lastSecond(expires, issued, at);
      return last * 1000 < at ? { verdict: "expired" } : { verdict: "ok", lastSecond: last };
    },
  };
}

export type UrlSigner = ReturnType<typeof createUrlSigner>;
