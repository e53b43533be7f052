import { randomBytes } from "node:crypto";
import type { Gunzip } from "node:zlib";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * The gateway's gunzip streams (the decompressing meter's), held until the test opens the gate: a
 * decompressor that lags as far behind the provider as a test likes. Each records the most bytes
 * it ever had waiting.
 */
const decoding = vi.hoisted(() => {
  let open = false;
  const held: (() => void)[] = [];
  return {
    mostQueued: 0,
    /** Set once the meter waits for its decoder to catch up (a `drain` listener on it). */
    waitedForRoom: false,
    hold(go: () => void) {
      if (open) go();
      else held.push(go);
    },
    open() {
      open = true;
      for (const go of held.splice(0)) go();
    },
    /** Holds the next decoders again, and forgets what was seen. */
    reset() {
      open = false;
      this.mostQueued = 0;
      this.waitedForRoom = false;
    },
  };
});

vi.mock("node:zlib", async (importOriginal) => {
  const zlib = await importOriginal<typeof import("node:zlib")>();
  return {
    ...zlib,
    createGunzip: (options?: object) => {
      const decoder = zlib.createGunzip(options) as Gunzip & {
        _transform(chunk: Buffer, encoding: string, done: () => void): void;
      };
      const transform = decoder._transform.bind(decoder);
      decoder._transform = (chunk, encoding, done) => decoding.hold(() => transform(chunk, encoding, done));
      const write = decoder.write.bind(decoder) as (chunk: Buffer) => boolean;
      decoder.write = ((chunk: Buffer) => {
        const room = write(chunk);
        decoding.mostQueued = Math.max(decoding.mostQueued, decoder.writableLength);
        return room;
      }) as typeof decoder.write;
      decoder.on("newListener", (event) => {
        if (event !== "drain") return;
        decoding.waitedForRoom = true;
        decoding.open();
      });
      return decoder;
    },
  };
});

/**
 * A provider that ignores `accept-encoding: identity` and floods: its gzip answer arrives far faster
 * than the usage meter's decompressor reads it. The client still gets every byte, the row every
 * token, and the gateway never holds more than the meter's cap of compressed bytes for the
 * decompressor: the provider is paused until it catches up.
 */
/** The most compressed bytes the meter holds for its decompressor (maxQueuedBytes). */
const maxQueuedBytes = 1024 * 1024;

describe("a provider that floods a compressed answer faster than it decodes", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;
  // ~6 MiB of gzip (base64 of random bytes, gzipped fast), the usage after it.
  const filler = randomBytes(4608 * 1024).toString("base64");
  const body = gzipSync(
    JSON.stringify({
      id: "chatcmpl-1",
      object: "chat.completion",
      model: "gpt-4o-mini-2024-07-18",
      filler,
      choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 12, completion_tokens: 7 },
    }),
    { level: 1 },
  );

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      request.resume();
      // An error's compressed body is decoded to mask the key too (up to 1 MiB): this one is past it.
      response.writeHead(request.url?.includes("error") ? 500 : 200, {
        "content-type": "application/json",
        "content-encoding": "gzip",
        "content-length": String(body.length),
      });
      response.end(body);
    });
    sluice = await startTestGateway({ providerABaseUrl: `${upstream.url}/a/v1` });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    decoding.open();
    await sluice.close();
    await upstream.close();
  });

  const call = (path: string) =>
    fetch(`${sluice.url}/v1/provider-a/${project.projectId}/${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });

  it("pauses the provider while the decompressor lags, and loses neither bytes nor usage", async () => {
    expect(body.length).toBeGreaterThan(4 * maxQueuedBytes);
    decoding.reset();
    const response = await call("chat/completions");
    expect(response.status).toBe(200);
    expect(response.headers.get("content-encoding")).toBe("gzip");
    // The decompressor is held until the client has read the whole body, or until the meter waits
    // for it to catch up (the provider then paused): whichever comes first.
    const text = await response.text().finally(() => decoding.open()); // fetch decodes it
    expect(JSON.parse(text).usage).toEqual({ prompt_tokens: 12, completion_tokens: 7 });
    expect(decoding.mostQueued).toBeLessThanOrEqual(maxQueuedBytes + 128 * 1024);
    expect(decoding.waitedForRoom).toBe(true);
    const row = await usageRowOf(sluice.gateway, response);
    expect([row.input_tokens, row.output_tokens, row.outcome]).toEqual([12, 7, "ok"]);
  });

  it("pauses it too for an error answer, whose body past 1 MiB is not forwarded", async () => {
    decoding.reset();
    const response = await call("error/chat/completions");
    expect(response.status).toBe(500);
    expect(await response.text().finally(() => decoding.open())).toBe("");
    expect(decoding.mostQueued).toBeLessThanOrEqual(maxQueuedBytes + 128 * 1024);
    expect(decoding.waitedForRoom).toBe(true);
    const row = await usageRowOf(sluice.gateway, response);
    expect([row.status, row.outcome]).toEqual([500, "error"]);
  });
});
