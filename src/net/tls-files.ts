import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { createSecureContext } from "node:tls";
import { fileNameShown, isFileContents, unreadableReason } from "../file-name-shown.js";

/** A start failure about a setting: its message names the variable (and the file). */
export class StartSettingError extends Error {
  override name = "StartSettingError";
}

/**
 * Reads SLUICE_TLS_CERT and SLUICE_TLS_KEY and checks them as the HTTPS server will, before anything
 * else starts: a missing file, one that is not PEM, or a key that is not the certificate's fails the
 * start naming the variable and the file, with OpenSSL's or Node's reason after it.
 */
export function readTlsFiles(certFile: string, keyFile: string): { cert: Buffer; key: Buffer } {
  const cert = read("SLUICE_TLS_CERT", certFile);
  const key = read("SLUICE_TLS_KEY", keyFile);
  check(`SLUICE_TLS_CERT (${certFile}) is not a PEM certificate`, () => createSecureContext({ cert }));
  check(`SLUICE_TLS_KEY (${keyFile}) is not a PEM private key`, () => createSecureContext({ key }));
  const mismatch = `SLUICE_TLS_KEY (${keyFile}) is not the key of SLUICE_TLS_CERT (${certFile})`;
  check(mismatch, () => createSecureContext({ cert, key }));
  // OpenSSL compares a key with the certificate of its own type only: a key of another type (RSA
  // beside a P-256 certificate) was taken without a word, and every handshake then failed.
  if (!new X509Certificate(cert).checkPrivateKey(createPrivateKey(key)))
    throw new StartSettingError(`${mismatch}: the certificate's public key is not this key's`);
  return { cert, key };
}

/**
 * A setting holding the PEM itself rather than its file's name is named with the PEM's start and
 * length alone, and without Node's message, which repeats the name: the key would be printed.
 */
function read(variable: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    if (isFileContents(file))
      throw new StartSettingError(
        `${variable} (${fileNameShown(file)}) cannot be read (${unreadableReason(error)})`,
      );
    throw new StartSettingError(`${variable} (${file}) cannot be read`, { cause: error });
  }
}

function check(problem: string, attempt: () => unknown): void {
  try {
    attempt();
  } catch (error) {
    throw new StartSettingError(problem, { cause: error });
  }
}
