import { createHash, createHmac } from "node:crypto";
import { request } from "undici";
import { s3PresignMaxSeconds } from "../config.js";
import { isSafeVaultPath, mediaTypeOf, type VaultStore, vaultMaxAgeSeconds } from "./vault-store.js";

export interface S3VaultOptions {
  endpoint: string;
  bucket: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** Path-style URLs (`<endpoint>/<bucket>/<key>`), as S3-compatible stores expect; false: the endpoint is the bucket's host. */
  pathStyle?: boolean;
  now?: () => Date;
}

/**
 * The vault in S3-compatible object storage, for several instances. Objects are written with a
 * presigned PUT and read through presigned GET URLs (AWS Signature Version 4, query-string
 * authentication), so no SDK is needed.
 */
export function createS3Vault(options: S3VaultOptions): VaultStore {
  const now = options.now ?? (() => new Date());
  return {
    async put(path, bytes, mediaType, signal) {
      // The same paths as the local vault, so a project behaves alike on either store.
      if (!isSafeVaultPath(path)) throw new Error("unsafe vault path");
      const url = presignS3Url(options, "PUT", path, 300, now());
      const response = await request(url, {
        method: "PUT",
        body: bytes,
        headers: { "content-type": mediaType, "content-length": String(bytes.length) },
        // Without it, a store that takes the PUT and never answers holds the request for undici's
        // 5-minute header timeout; the signal also covers reading the answer.
        signal,
      });
      if (response.statusCode >= 300) throw await storeRefusal(response.statusCode, response.body);
      await response.body.dump();
    },
    async remove(path, signal) {
      if (!isSafeVaultPath(path)) throw new Error("unsafe vault path");
      const response = await request(presignS3Url(options, "DELETE", path, 300, now()), {
        method: "DELETE",
        signal,
      });
      // S3 answers 204 whether or not the object was there; other stores may say 404.
      if (response.statusCode >= 300 && response.statusCode !== 404)
        throw await storeRefusal(response.statusCode, response.body);
      await response.body.dump();
    },
    signedUrl: (path, ttlSeconds) => {
      const at = now();
      return presignS3Url(options, "GET", path, ttlSeconds, at, servingHeaders(path, ttlSeconds, at));
    },
  };
}

/**
 * What the store is asked to answer a presigned GET with (S3's `response-*` overrides, covered by
 * the signature), as the local vault serves its files: the image's type by its extension, whatever
 * the store kept from the upload; and a private cache lifetime that ends 5 minutes after signing or
 * at the URL's expiry, whichever is first (`Expires`, with no max-age, which a URL fixed when signed
 * cannot count from the moment it is fetched), so no cached copy outlives the URL. The store cannot
 * be asked for `X-Content-Type-Options: nosniff` (S3 has no such override), but it serves from its
 * own origin, never Sluice's.
 */
function servingHeaders(path: string, ttlSeconds: number, at: Date): Record<string, string> {
  const freshSeconds = vaultMaxAgeSeconds(at.getTime() / 1000 + ttlSeconds, at.getTime());
  return {
    "response-cache-control": "private",
    "response-content-type": mediaTypeOf(path),
    "response-expires": new Date(at.getTime() + freshSeconds * 1000).toUTCString(),
  };
}

/**
 * The store's refusal, with its own error code (`<Code>` of S3's error body: `InvalidAccessKeyId`,
 * `SignatureDoesNotMatch`, `RequestTimeTooSkewed`, `SlowDown`…) as the error's code: the operator's
 * log then tells bad credentials from a skewed clock or a store shedding load, where the status
 * alone does not, and each code is logged apart. Only the code is read from the body (its first
 * 4 KiB): S3's other fields name the request, never the secret key, but need not be logged.
 */
async function storeRefusal(status: number, body: AsyncIterable<Buffer> & { destroy(): unknown }) {
  let text = "";
  try {
    for await (const chunk of body) {
      text += chunk.toString("utf8");
      if (text.length >= 4096) break;
    }
  } catch {
    // An error body cut short says no less than the status.
  }
  body.destroy();
  const code = /<Code>([A-Za-z0-9.]{1,64})<\/Code>/.exec(text)?.[1];
  return Object.assign(
    new Error(`the vault's object store answered ${status}${code ? ` (${code})` : ""}`),
    code ? { code } : {},
  );
}

/**
 * A SigV4 presigned URL (AWS S3 docs, "Authenticating Requests: Using Query Parameters"), good from
 * `date` for `expiresSeconds` at least. X-Amz-Date is a whole second, `date`'s rounded down, and
 * the URL lives X-Amz-Expires from it: signed within a second, it asks a second more, so it lives
 * its TTL at least (a second more at most), as the local vault's URLs do. The stamp is not rounded
 * up instead: a store refuses a URL stamped after the moment it is used ("Request is not yet
 * valid"). Never more than S3's 7 days, which the store would refuse: at that TTL a URL signed
 * within a second lives up to a second less.
 */
export function presignS3Url(
  options: S3VaultOptions,
  method: string,
  key: string,
  expiresSeconds: number,
  date: Date,
  /** More query parameters to sign (`response-content-type`…). */
  extraQuery: Record<string, string> = {},
): string {
  const endpoint = new URL(options.endpoint);
  const pathStyle = options.pathStyle ?? true;
  const objectPath = `${pathStyle ? `/${encodeSegment(options.bucket)}` : ""}/${key.split("/").map(encodeSegment).join("/")}`;
  const basePath = endpoint.pathname.replace(/\/+$/, "");
  const canonicalPath = `${basePath}${objectPath}`;
  const stamp = date
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "");
  const day = stamp.slice(0, 8);
  const scope = `${day}/${options.region}/s3/aws4_request`;
  const query: Record<string, string> = {
    "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
    "X-Amz-Credential": `${options.accessKeyId}/${scope}`,
    "X-Amz-Date": stamp,
    "X-Amz-Expires": String(
      Math.min(expiresSeconds + (date.getUTCMilliseconds() > 0 ? 1 : 0), s3PresignMaxSeconds),
    ),
    "X-Amz-SignedHeaders": "host",
    ...extraQuery,
  };
  const canonicalQuery = Object.keys(query)
    .sort()
    .map((name) => `${encodeSegment(name)}=${encodeSegment(query[name] ?? "")}`)
    .join("&");
  const canonicalRequest = [
    method,
    canonicalPath,
    canonicalQuery,
    `host:${endpoint.host}`,
    "",
    "host",
    "UNSIGNED-PAYLOAD",
  ].join("\n");
  const stringToSign = ["AWS4-HMAC-SHA256", stamp, scope, sha256Hex(canonicalRequest)].join("\n");
  let signingKey: Buffer = Buffer.from(`AWS4${options.secretAccessKey}`);
  for (const part of [day, options.region, "s3", "aws4_request"]) signingKey = hmac(signingKey, part);
  const signature = hmac(signingKey, stringToSign).toString("hex");
  return `${endpoint.protocol}//${endpoint.host}${canonicalPath}?${canonicalQuery}&X-Amz-Signature=${signature}`;
}

/** RFC 3986 encoding as SigV4 wants it: everything but unreserved characters. */
function encodeSegment(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (char) => `%${char.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

function hmac(key: Buffer, data: string): Buffer {
  return createHmac("sha256", key).update(data).digest();
}

function sha256Hex(data: string): string {
  return createHash("sha256").update(data).digest("hex");
}
