import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * HMAC-SHA256 signed, expiring URLs for the local vault:
 * `<base>/v1/vault/<path>?expires=<unix seconds>&signature=<base64url hmac(path \n expires)>`.
 * A URL is good through the millisecond its expiry names, and refused from the next. `previousKey`
 * (during a master key rotation) verifies the URLs signed before it, which are still handed out.
 */
export function createUrlSigner(key: Buffer, now: () => number = Date.now, previousKey?: Buffer) {
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
      return expires * 1000 < now() ? "expired" : "ok";
    },
  };
}

export type UrlSigner = ReturnType<typeof createUrlSigner>;
