import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * HMAC-SHA256 signed, expiring URLs for the local vault:
 * `<base>/v1/vault/<path>?expires=<unix seconds>&signature=<base64url hmac(path \n expires)>`.
 * A URL is good through the millisecond its expiry names, and refused from the next. `previousKey`
 * (during a master key rotation) verifies the URLs signed before it, which are still handed out.
 * With `maxTtlSeconds` (SLUICE_VAULT_URL_TTL_SECONDS), a URL whose expiry lies further ahead than
 * a URL signed now would get is refused as expired: lowering the TTL (a URL shared too widely)
 * shortens the URLs already handed out too, rather than only those signed from then on.
 */
export function createUrlSigner(
  key: Buffer,
  now: () => number = Date.now,
  previousKey?: Buffer,
  maxTtlSeconds?: number,
) {
  const signWith = (signingKey: Buffer, path: string, expires: number) =>
    createHmac("sha256", signingKey).update(`${path}\n${expires}`).digest("base64url");
  const sign = (path: string, expires: number) => signWith(key, path, expires);
  const matches = (signingKey: Buffer, path: string, expires: number, signature: string) => {
    const expected = Buffer.from(signWith(signingKey, path, expires));
    const actual = Buffer.from(signature);
    return expected.length === actual.length && timingSafeEqual(expected, actual);
  };
  return {
    sign(baseUrl: string, path: string, ttlSeconds: number): string {
      // Rounded up to the second it names: the URL lives its TTL at least, a second more at most.
      // Rounded down, one signed late in a second lived up to a second less (with a TTL of 1, a
      // millisecond).
      const expires = Math.ceil(now() / 1000) + ttlSeconds;
      return `${baseUrl.replace(/\/+$/, "")}/v1/vault/${path}?expires=${expires}&signature=${sign(path, expires)}`;
    },
    /** "ok", or why the URL is refused. */
    verify(path: string, expiresText: string | null, signature: string | null): "ok" | "expired" | "invalid" {
      // The expiry exactly as signed (decimal digits): another notation of the same number (`0x…`,
      // `+…`, `….0`) is a tampered URL, refused as one.
      if (!expiresText || !signature || !/^[1-9][0-9]{0,14}$/.test(expiresText)) return "invalid";
      const expires = Number(expiresText);
      const signed =
        matches(key, path, expires, signature) ||
        (previousKey !== undefined && matches(previousKey, path, expires, signature));
      if (!signed) return "invalid";
      const at = now();
      if (expires * 1000 < at) return "expired";
      // The latest expiry `sign` gives now: its TTL from the second it rounds up to.
      if (maxTtlSeconds !== undefined && expires > Math.ceil(at / 1000) + maxTtlSeconds) return "expired";
      return "ok";
    },
  };
}

export type UrlSigner = ReturnType<typeof createUrlSigner>;
