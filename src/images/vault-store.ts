/**
 * Where generated images are kept when a project saves them to the Vault: a local directory
 * (default) or S3-compatible object storage, behind one interface.
 */
export interface VaultStore {
  put(path: string, bytes: Uint8Array, mediaType: string): Promise<void>;
  /** A URL that fetches the object for `ttlSeconds`, without other credentials. */
  signedUrl(path: string, ttlSeconds: number): string;
}

const segment = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** True for a relative vault path of safe segments: no `..`, no empty segments, no encodings. */
export function isSafeVaultPath(path: string): boolean {
  const parts = path.split("/");
  return (
    parts.length >= 2 &&
    parts.length <= 12 &&
    parts.every((part) => segment.test(part) && !part.includes(".."))
  );
}

const extensions: Record<string, string> = {
  "image/png": "png",
  "image/jpeg": "jpg",
  "image/webp": "webp",
  "image/gif": "gif",
};

export function extensionOf(mediaType: string): string {
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
