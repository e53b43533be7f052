import { startFakeUpstream } from "./fake-upstream.js";

/** Runs the fake upstream as its own process (for the benchmark): prints `{"url":…}` on one line. */
const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
const keepAlive = process.env.FAKE_KEEP_ALIVE_TIMEOUT_MS;
const fake = await startFakeUpstream({
  port,
  ...(keepAlive ? { keepAliveTimeoutMs: Number(keepAlive) } : {}),
});
const delay = Number(process.env.FAKE_SSE_DELAY_MS ?? 0);
if (delay > 0) fake.setSseDelayMs(delay);
// The benchmark sends many requests: keep no history.
setInterval(() => fake.clear(), 1000).unref();
process.stdout.write(`${JSON.stringify({ url: fake.url })}\n`);
process.once("SIGTERM", () => void fake.close().then(() => process.exit(0)));
