import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { generateAppleKeyPair } from "../../test/fakes/fake-apple.js";
import { developmentDeviceCheck, openingSecretBox } from "../../test/support/device-check-settings.js";
import { blankProject } from "../admin/project-rules.js";
import { createLogger } from "../observability/logger.js";
import type { Project } from "../storage/project-repository.js";
import { createDeviceTokenVerifier } from "./device-token-verifier.js";

/**
 * Every Apple call in flight listens to the gateway's closing signal, which lives as long as the
 * process: more than ten at once (a burst of new devices, Apple slow to answer) are no leak, and
 * Node's "Possible EventTarget memory leak detected" warning, written to stderr, would say one.
 */
describe("the device token verifier's Apple calls over the gateway's closing signal", () => {
  const keys = generateAppleKeyPair();
  let server: Server;
  let url = "";
  let received = 0;

  beforeAll(async () => {
    // Apple slow to answer: the calls stay in flight until the close aborts them.
    server = createServer((request) => {
      received++;
      request.resume();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("takes twenty calls at once without Node's listener-leak warning, and the close ends them all", async () => {
    const secretBox = openingSecretBox(keys.privateKeyPem);
    const closing = new AbortController();
    const verifier = createDeviceTokenVerifier({
      config: {
        deviceCheckProductionUrl: url,
        deviceCheckDevelopmentUrl: url,
        deviceCheckTimeoutMs: 30_000,
        deviceTokenTtlSeconds: 3600,
        deviceTokenBudget: 100,
      },
      secretBox,
      redis: undefined,
      logger: createLogger("silent", new Writable({ write: (_chunk, _encoding, done) => done() })),
      closing: closing.signal,
    });
    const project: Project = blankProject("apps", new Date(Date.now() - 1000).toISOString());
    project.deviceCheck = developmentDeviceCheck(project.deviceCheck);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on("warning", onWarning);
    try {
      const asked = Array.from({ length: 20 }, () =>
        verifier.verify(project, randomBytes(64).toString("base64")),
      );
      await vi.waitFor(() => expect(received).toBe(20), { timeout: 10_000 });
      closing.abort();
      const verdicts = await Promise.all(asked);
      expect(verdicts.every((verdict) => verdict.kind === "unavailable")).toBe(true);
      // A warning is emitted on the next turn.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((warning) => warning.startsWith("MaxListenersExceededWarning"))).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });
});
