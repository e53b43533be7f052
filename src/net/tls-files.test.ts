import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { selfSigned } from "../../test/support/self-signed.js";
import { readTlsFiles } from "./tls-files.js";

describe("readTlsFiles", () => {
  const dir = mkdtempSync(join(tmpdir(), "sluice-tls-files-"));
  const { cert, key } = selfSigned();
  const certFile = join(dir, "cert.pem");
  writeFileSync(certFile, cert);
  const keyFile = (name: string, pem: string | Buffer) => {
    const file = join(dir, name);
    writeFileSync(file, pem);
    return file;
  };
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("takes a certificate and its own key", () => {
    expect(readTlsFiles(certFile, keyFile("own.pem", key))).toEqual({ cert, key });
  });

  it.each([
    ["another P-256 key, of the certificate's type", "ec" as const],
    // OpenSSL keeps a key of another type than the certificate's beside it, without a word: every
    // handshake then fails, as no certificate goes with that key.
    ["an RSA key, of another type than the certificate's P-256 one", "rsa" as const],
  ])("refuses %s, naming both settings", (_, type) => {
    const other =
      type === "ec"
        ? generateKeyPairSync("ec", { namedCurve: "prime256v1" })
        : generateKeyPairSync("rsa", { modulusLength: 2048 });
    const file = keyFile(`${type}.pem`, other.privateKey.export({ type: "pkcs8", format: "pem" }));
    expect(() => readTlsFiles(certFile, file)).toThrow(
      `SLUICE_TLS_KEY (${file}) is not the key of SLUICE_TLS_CERT (${certFile})`,
    );
  });
});
