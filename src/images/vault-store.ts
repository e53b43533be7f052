/**
 * Where generated images are kept when a project saves them to the Vault: a local directory
 * (default) or S3-compatible object storage, behind one interface.
 */
export interface VaultStore {
  /** `signal` stops the write (its deadline passed, or the client left); the write then fails. */
  put(path: string, bytes: Uint8Array, mediaType: string, signal?: AbortSignal): Promise<void>;
  /**
   * Deletes an object stored for a request that failed after all (its answer never named it); an
   * object already gone is no failure. `signal` stops the deletion.
   */
  remove(path: string, signal?: AbortSignal): Promise<void>;
  /** A URL that fetches the object for `ttlSeconds`, without other credentials. */
  signedUrl(path: string, ttlSeconds: number): string;
}

/**
 * What a team id may be: 1 to 64 letters, digits, `_` and `-`. It is the first segment of every
 * vault path (a directory, or an S3 key prefix), so the admin input and the vault check share this
 * one rule. A leading `_` or `-` is harmless there; without `.` it is never `.`, `..` or hidden.
 */
export const teamIdPattern = /^[A-Za-z0-9_-]{1,64}$/;

/** Any later segment (`generated-images`, the project id, the date, `<uuid>.<ext>`). */
const segment = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * True for a relative vault path of safe segments, the first a team id: no `..`, no hidden names,
 * no empty segments, no encodings.
 */
export function isSafeVaultPath(path: string): boolean {
  const [teamId = "", ...rest] = path.split("/");
  return (
    teamIdPattern.test(teamId) &&
    rest.length >= 1 &&
    rest.length <= 11 &&
    rest.every((part) => segment.test(part) && !part.includes(".."))
  );
}

/**
 * Seconds a served vault file may be cached: at most five minutes, and never past the expiry
 * (unix seconds) of the signed URL it was fetched with, after which that URL answers 403.
 */
export function vaultMaxAgeSeconds(expires: number, nowMs: number): number {
  return Math.max(0, Math.min(300, Math.floor(expires - nowMs / 1000)));
}

const extensions: Record<string, string> = {
  "image/png": "png",
  "image/jpeg": "jpg",
  "image/webp": "webp",
  "image/gif": "gif",
  "image/heic": "heic",
  "image/heif": "heif",
};

function extensionOf(mediaType: string): string {
  return extensions[mediaType] ?? "bin";
}

export function mediaTypeOf(path: string): string {
  const extension = path.slice(path.lastIndexOf(".") + 1);
  return (
    Object.entries(extensions).find(([, candidate]) => candidate === extension)?.[0] ??
    "application/octet-stream"
  );
}

/** `<team_id>/generated-images/<project_id>/<yyyy>/<mm>/<dd>/<uuid>.<ext>` (UTC date). */
export function vaultPath(
  teamId: string,
  projectId: string,
  date: Date,
  id: string,
  mediaType: string,
): string {
  const iso = date.toISOString();
  return `${teamId}/generated-images/${projectId}/${iso.slice(0, 4)}/${iso.slice(5, 7)}/${iso.slice(8, 10)}/${id}.${extensionOf(mediaType)}`;
}
