import { randomBytes } from "node:crypto";
import { getEventListeners } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../../test/fakes/fake-apple.js";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { createDeviceCheckClient } from "./device-check-client.js";

/**
 * The gateway hands every Apple call one signal that lives as long as the process (aborted at its
 * close). The client tied it to each call's deadline with `AbortSignal.any([timeout, closing])`,
 * which on Node 20 (a) adds each call's composite signal to `closing`'s dependants for good, one
 * entry per Apple call for the process's life, and (b) holds the timeout's signal weakly, so a
 * garbage collection could take it with its timer and the call's deadline never came
 * (nodejs/node#57736, src/net/deadline-signal.ts).
 */
const keys = generateAppleKeyPair();
const token = randomBytes(1200).toString("base64");
const timeoutMs = 600;

/** What `signal` keeps of the signals built over it (Node's own `kDependantSignals`), when it keeps any. */
function dependantsOf(signal: AbortSignal): number {
  const symbol = Object.getOwnPropertySymbols(signal).find(
    (each) => each.description === "kDependantSignals",
  );
  if (symbol === undefined) return 0;
  // Node's own SafeSet, which is no `instanceof Set`.
  const held = (signal as unknown as Record<symbol, { size?: unknown } | undefined>)[symbol];
  return typeof held?.size === "number" ? held.size : 0;
}

describe("the DeviceCheck client with the gateway's closing signal", () => {
  let server: Server;
  let url = "";
  const dispatcher = new Agent({ keepAliveTimeout: 1000 });

  beforeAll(async () => {
    // `/ok`: Apple's 200 at once. `/trickle`: headers at once, then a byte every 50 ms, never idle
    // for the body timeout: only the call's own deadline ends it.
    server = createServer((request, response) => {
      request.resume();
      if (request.url?.startsWith("/ok/")) return void response.end();
      response.writeHead(200, { "content-type": "text/plain" });
      const timer = setInterval(() => response.write(" "), 50);
      response.on("close", () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await dispatcher.close();
  });

  const client = (path: string) =>
    createDeviceCheckClient({
      productionUrl: `${url}/${path}`,
      developmentUrl: `${url}/${path}`,
      timeoutMs,
      dispatcher,
    });
  const input = {
    environment: "production",
    teamId: "TEAM123456",
    keyId: "KEY1234567",
    privateKeyPem: keys.privateKeyPem,
    deviceToken: token,
  } as const;

  it("keeps nothing of its calls in the closing signal: no dependant signal, no listener", async () => {
    const closing = new AbortController();
    const ok = client("ok");
    for (let call = 0; call < 200; call++)
      expect(await ok.validate(input, closing.signal)).toEqual({ kind: "valid" });
    collectGarbage();
    expect(getEventListeners(closing.signal, "abort")).toHaveLength(0);
    expect(dependantsOf(closing.signal)).toBe(0);
  });

  it("ends a call whose answer keeps trickling at its timeout, a garbage collection meanwhile", {
    timeout: 60_000,
  }, async () => {
    const closing = new AbortController();
    const ok = client("ok");
    // Warmed up, so the call is optimized and keeps only the locals it reads later.
    for (let call = 0; call < 1500; call++) await ok.validate(input, closing.signal);
    const startedAt = performance.now();
    const verdict = client("trickle").validate(input, closing.signal);
    for (let turn = 0; turn < 3; turn++) {
      await new Promise((resolve) => setTimeout(resolve, 30));
      collectGarbage();
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise((resolve) => {
      timer = setTimeout(() => resolve("still running"), timeoutMs + 2000);
    });
    try {
      expect(await Promise.race([verdict, late])).toMatchObject({ kind: "unavailable", reason: "timeout" });
    } finally {
      clearTimeout(timer);
      closing.abort();
    }
    expect(performance.now() - startedAt).toBeLessThan(timeoutMs + 1500);
  });
});
