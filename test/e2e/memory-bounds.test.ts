import { randomBytes } from "node:crypto";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { partialKeyPrefix } from "../../src/auth/partial-key.js";
import { heapUsedAfterGc } from "../support/garbage-collection.js";
import { startProxiedPostgresGateway } from "../support/proxied-postgres-gateway.js";
import { postgresAvailable } from "../support/services.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * The caches and counters that made-up project ids, key ids and addresses reach are bounded in
 * entries; each entry must also hold only its own few bytes. V8 makes a substring of 13 characters
 * or more a view of the string it was cut from, so a key cut from a request line or a header (up to
 * 16 KiB) and kept in a long-lived map would keep that whole line alive: 100,000 throttle keys of
 * 16 KiB are 1.6 GB. Each case sends `requests` refused requests, each with new ids from a new
 * address (x-forwarded-for, trusted from 127.0.0.1), once plain and once padded, and compares the
 * heaps they leave: the padding must not stay.
 */
const requests = 2000;
const agent = new Agent({ connections: 16 });
let sent = 0;

afterAll(() => agent.close());

/** A new address per request: 198.51.x.y and then some, 13 characters or more. */
function nextAddress(): string {
  sent++;
  return `198.${100 + ((sent >> 14) & 127)}.${100 + ((sent >> 7) & 127)}.${100 + (sent & 127)}`;
}

/** A made-up project id of 40 characters, new each time. */
const madeUpId = () => `made-up-${randomBytes(16).toString("hex")}`;

async function send(sluice: TestGateway, path: string, headers: Record<string, string>): Promise<number> {
  const response = await request(`${sluice.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-forwarded-for": nextAddress(), ...headers },
    body: "{}",
    dispatcher: agent,
  });
  await response.body.dump();
  return response.statusCode;
}

/** How much the heap grew after `requests` calls of `one`, which each answer `status`. */
async function heapGrowth(one: (index: number) => Promise<number>, status: number): Promise<number> {
  const before = heapUsedAfterGc();
  for (let start = 0; start < requests; start += 50) {
    const statuses = await Promise.all(Array.from({ length: 50 }, (_, offset) => one(start + offset)));
    expect(new Set(statuses)).toEqual(new Set([status]));
  }
  return heapUsedAfterGc() - before;
}

async function expectPaddingNotKept(
  padding: number,
  one: (index: number, pad: string) => Promise<number>,
  status: number,
): Promise<void> {
  const plain = await heapGrowth((index) => one(index, ""), status);
  const padded = await heapGrowth((index) => one(index, "x".repeat(padding)), status);
  // Kept, the padding would add `padding` bytes a request; a tenth of it allows for noise.
  expect(padded - plain).toBeLessThan((requests * padding) / 10);
}

describe("memory kept per made-up id", () => {
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    sluice = await startTestGateway({ trustProxy: ["127.0.0.1"] });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(() => sluice.close());

  it("keeps no request line behind a made-up project id in the path", async () => {
    await expectPaddingNotKept(
      15_000,
      (_, pad) =>
        send(sluice, `/v1/provider-a/${madeUpId()}/chat/completions${pad ? `?pad=${pad}` : ""}`, {}),
      404,
    );
  });

  it("keeps no header behind a made-up x-project-id", async () => {
    await expectPaddingNotKept(
      15_000,
      (_, pad) => send(sluice, "/v1/text", { "x-project-id": `${madeUpId()}${pad}` }),
      404,
    );
  });

  it("keeps no header behind a made-up key id in a partial key", async () => {
    await expectPaddingNotKept(
      4_000,
      (_, pad) => {
        const keyId = randomBytes(16).toString("hex");
        const partialKey = `${partialKeyPrefix}${keyId}_${randomBytes(24).toString("base64url")}${pad}`;
        return send(sluice, `/v1/provider-a/${project.projectId}/chat/completions`, {
          authorization: `Bearer ${partialKey}.${project.testKey}`,
        });
      },
      401,
    );
  });
});

/**
 * While the database is down, usage rows wait in the queue (SLUICE_USAGE_QUEUE_MAX, 100,000 by
 * default): a row must hold its own project id, not the request line it was read from.
 */
describe.skipIf(!postgresAvailable)("memory kept per queued usage row", () => {
  /** `run` on a gateway whose PostgreSQL is cut: its rows wait in the queue. */
  async function whileDatabaseCut(run: (sluice: TestGateway) => Promise<void>): Promise<void> {
    const { proxy, sluice, close } = await startProxiedPostgresGateway({ trustProxy: ["127.0.0.1"] });
    try {
      proxy.cut();
      await run(sluice);
    } finally {
      await close();
    }
  }

  // 4,000 refusals, each of which tries the database first: ~18 s alone on a 2-core machine.
  const outageTimeout = { timeout: 60_000 };

  it(
    "keeps no request line behind the made-up project id of a row queued during an outage",
    outageTimeout,
    () =>
      whileDatabaseCut((sluice) =>
        // The id cannot be looked up: 503, with its row, which waits for the database.
        expectPaddingNotKept(
          15_000,
          (_, pad) =>
            send(sluice, `/v1/provider-a/${madeUpId()}/chat/completions${pad ? `?pad=${pad}` : ""}`, {}),
          503,
        ),
      ),
  );

  it(
    "keeps no x-forwarded-for header behind the client address of a row queued during an outage",
    outageTimeout,
    () =>
      whileDatabaseCut((sluice) =>
        // Behind a trusted proxy the client's address is the right-most entry, cut from a header the
        // client may fill with up to 16 KiB of entries of its own on the left.
        expectPaddingNotKept(
          15_000,
          (_, pad) =>
            send(sluice, `/v1/provider-a/${madeUpId()}/chat/completions`, {
              "x-forwarded-for": `${pad ? `${pad}, ` : ""}${nextAddress()}`,
            }),
          503,
        ),
      ),
  );
});
