import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A self-signed certificate for localhost (P-256, a day), written as `cert.pem` and `key.pem` into
 * `dir` (openssl is installed by .ci/run where missing).
 */
export function writeSelfSigned(dir: string): { certFile: string; keyFile: string } {
  const [certFile, keyFile] = [join(dir, "cert.pem"), join(dir, "key.pem")];
  execFileSync(
    "openssl",
    ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]
      .concat(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"])
      .concat(["-keyout", keyFile, "-out", certFile]),
    { stdio: "ignore" },
  );
  return { certFile, keyFile };
}

/** A self-signed certificate for localhost, in memory. */
export function selfSigned(): { cert: Buffer; key: Buffer } {
  const dir = mkdtempSync(join(tmpdir(), "sluice-tls-"));
  try {
    const { certFile, keyFile } = writeSelfSigned(dir);
    return { cert: readFileSync(certFile), key: readFileSync(keyFile) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
