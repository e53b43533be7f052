/**
 * The packages only some calls need, each loaded on first use: a start on the embedded default
 * (SQLite, no Redis) answers /health without them (docs/decisions/0005; the sources:
 * test/e2e/start-modules.test.ts, the production build: test/e2e/production-build.test.ts).
 */
export const loadedOnFirstUse = [
  "ai",
  "@ai-sdk/openai",
  "@ai-sdk/anthropic",
  "@ai-sdk/google",
  "pg",
  "ioredis",
  // Output schemas of structured calls.
  "ajv",
  // Admin input and SLUICE_CONFIG_FILE (the settings are read without it).
  "zod",
];
