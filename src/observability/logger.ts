import { type DestinationStream, type Logger, pino } from "pino";

export type { Logger };

/**
 * Every place a credential could sit in a log object. Redaction is the logger's job, not the
 * caller's discipline: a test logs objects full of secrets and checks none come out.
 */
export const redactedPaths = [
  "authorization",
  "*.authorization",
  "headers.authorization",
  "*.headers.authorization",
  "*.headers['x-api-key']",
  "*.headers['x-goog-api-key']",
  "*.headers['x-sluice-test-key']",
  "*.headers['x-ai-key']",
  "*.headers['x-device-token']",
  "*.headers.cookie",
  "headers['x-api-key']",
  "headers['x-goog-api-key']",
  "headers['x-sluice-test-key']",
  "headers['x-ai-key']",
  "headers['x-device-token']",
  "headers.cookie",
  "apiKey",
  "*.apiKey",
  "providerKey",
  "*.providerKey",
  "partialKey",
  "*.partialKey",
  "testKey",
  "*.testKey",
  "privateKey",
  "*.privateKey",
  "deviceToken",
  "*.deviceToken",
  "masterKey",
  "*.masterKey",
  "adminToken",
  "*.adminToken",
  "token",
  "*.token",
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: "sluice" },
      redact: { paths: redactedPaths, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
