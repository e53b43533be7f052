import type { IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { detachedString } from "../../src/detached-string.js";
import { createClientIpResolver } from "../../src/http/client-ip.js";
import { addressBlock } from "../../src/net/ip-address.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { heapUsedAfterGc } from "../support/garbage-collection.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

function requestFrom(peer: string, forwardedFor?: string): IncomingMessage {
  return {
    socket: { remoteAddress: peer },
    headers: forwardedFor === undefined ? {} : { "x-forwarded-for": forwardedFor },
  } as unknown as IncomingMessage;
}

describe("addressBlock", () => {
  it.each([
    ["198.51.100.7", "198.51.100.7"],
    ["2001:db8:0:1::a", "2001:db8:0:1::/64"],
    ["2001:db8:0:1:ffff:ffff:ffff:ffff", "2001:db8:0:1::/64"],
    // The right side of `::` reaching into the first four groups.
    ["2001:db8::1:1234:5678:9abc:def0", "2001:db8:0:1::/64"],
    ["2001:db8::1:0:0:0:1", "2001:db8:0:1::/64"],
    ["::1", "0:0:0:0::/64"],
    ["::", "0:0:0:0::/64"],
    ["fe80::1%eth0", "fe80:0:0:0::/64"],
    ["2001:0DB8:0000:0001::1", "2001:db8:0:1::/64"],
  ])("puts %s in %s", (address, block) => {
    expect(addressBlock(address)).toBe(block);
  });
});

describe("the client address behind trusted proxies", () => {
  const resolve = createClientIpResolver(["10.0.0.1", "2001:DB8::FE", "::ffff:10.0.0.2"]);

  it.each([
    ["198.51.100.7:50123", "198.51.100.7"],
    ["198.51.100.7", "198.51.100.7"],
    ["[2001:db8::7]:443", "2001:db8::7"],
    ["[2001:db8::7]", "2001:db8::7"],
    ["2001:DB8::7", "2001:db8::7"],
    ["::FFFF:198.51.100.7", "198.51.100.7"],
    // IPv4-mapped IPv6 however it is written: hex groups, zeros spelt out, in brackets with a port.
    ["::ffff:c633:6407", "198.51.100.7"],
    ["0:0:0:0:0:ffff:198.51.100.7", "198.51.100.7"],
    ["0::FFFF:C633:6407", "198.51.100.7"],
    ["[::ffff:c633:6407]:443", "198.51.100.7"],
    // Not IPv4-mapped (::ffff:0:0/96 is another block): an IPv6 address, kept whole.
    ["::ffff:0:198.51.100.7", "::ffff:0:198.51.100.7"],
    ["203.0.113.1, 198.51.100.7:1234 , 10.0.0.1", "198.51.100.7"],
    ["198.51.100.7, 2001:db8::fe, 10.0.0.2:80", "198.51.100.7"],
  ])("reads the x-forwarded-for entry %j as %j", (forwardedFor, expected) => {
    expect(resolve(requestFrom("10.0.0.1", forwardedFor))).toBe(expected);
  });

  it("believes x-forwarded-for only from a trusted peer, and falls back to the peer", () => {
    expect(resolve(requestFrom("192.0.2.50", "198.51.100.7"))).toBe("192.0.2.50");
    expect(resolve(requestFrom("::ffff:192.0.2.50", "198.51.100.7"))).toBe("192.0.2.50");
    expect(resolve(requestFrom("::ffff:10.0.0.2", "198.51.100.7:9"))).toBe("198.51.100.7");
    expect(resolve(requestFrom("2001:db8::fe", "198.51.100.7"))).toBe("198.51.100.7");
    expect(resolve(requestFrom("10.0.0.1", " , 10.0.0.1,"))).toBe("10.0.0.1");
    expect(resolve(requestFrom("10.0.0.1"))).toBe("10.0.0.1");
  });

  it("takes the left-most entry when every entry is a trusted proxy: the hop that reached the first proxy", () => {
    expect(resolve(requestFrom("10.0.0.1", "10.0.0.2"))).toBe("10.0.0.2");
    expect(resolve(requestFrom("10.0.0.1", "2001:db8::fe, 10.0.0.2"))).toBe("2001:db8::fe");
    expect(resolve(requestFrom("10.0.0.1", "10.0.0.1"))).toBe("10.0.0.1");
  });

  it.each([
    ["unknown", "10.0.0.1"],
    ["198.51.100.7, unknown", "10.0.0.1"],
    ["198.51.100.7, _hidden, 10.0.0.2", "10.0.0.2"],
    [`198.51.100.7, not-an-address-at-all-${"x".repeat(500)}`, "10.0.0.1"],
    ["198.51.100.7, 999.1.1.1", "10.0.0.1"],
    ["unknown, 198.51.100.7", "198.51.100.7"],
    // An IPv6 zone (`%…`, which Node's isIP takes as letters, digits, `-`, `.` and `:` of any
    // length) names an interface of the machine that wrote it, never a remote client's: as free
    // text, it made a client address of up to 16 KiB in usage rows and the access line.
    [`fe80::1%${"x".repeat(500)}`, "10.0.0.1"],
    ["198.51.100.7, 2001:db8::7%eth0", "10.0.0.1"],
  ])("stops at an entry that is not an address: %j is %j", (forwardedFor, expected) => {
    expect(resolve(requestFrom("10.0.0.1", forwardedFor))).toBe(expected);
  });
});

describe("trusted proxies given as subnets", () => {
  const resolve = createClientIpResolver(["10.0.0.0/8", "2001:db8:ff::/48", "192.0.2.10"]);

  it("believes x-forwarded-for from any address in a trusted subnet", () => {
    expect(resolve(requestFrom("10.20.30.40", "198.51.100.7"))).toBe("198.51.100.7");
    expect(resolve(requestFrom("::ffff:10.20.30.40", "198.51.100.7"))).toBe("198.51.100.7");
    expect(resolve(requestFrom("2001:db8:ff:1::5", "198.51.100.7"))).toBe("198.51.100.7");
    expect(resolve(requestFrom("192.0.2.10", "198.51.100.7, 10.9.9.9"))).toBe("198.51.100.7");
    expect(resolve(requestFrom("11.0.0.1", "198.51.100.7"))).toBe("11.0.0.1");
    expect(resolve(requestFrom("2001:db8:fe::5", "198.51.100.7"))).toBe("2001:db8:fe::5");
  });

  it("counts a client inside a trusted subnet as itself, not as the proxy that carried it", () => {
    // An internal service calling through the load balancer: both in 10.0.0.0/8.
    expect(resolve(requestFrom("10.0.0.1", "10.20.30.40"))).toBe("10.20.30.40");
    expect(resolve(requestFrom("10.0.0.1", "10.20.30.41, 10.9.9.9"))).toBe("10.20.30.41");
    // A client outside them still cannot hide behind an address of theirs.
    expect(resolve(requestFrom("10.0.0.1", "10.20.30.40, 198.51.100.7"))).toBe("198.51.100.7");
  });

  it("reads a trusted proxy or subnet written as IPv4-mapped IPv6 as the IPv4 address or subnet it maps", () => {
    const mapped = createClientIpResolver([
      "::ffff:a00:1",
      "0:0:0:0:0:ffff:c000:200/120",
      "::ffff:172.16.0.0/108",
    ]);
    expect(mapped(requestFrom("10.0.0.1", "198.51.100.7"))).toBe("198.51.100.7");
    expect(mapped(requestFrom("::ffff:10.0.0.1", "198.51.100.8"))).toBe("198.51.100.8");
    expect(mapped(requestFrom("192.0.2.99", "198.51.100.9"))).toBe("198.51.100.9");
    expect(mapped(requestFrom("172.31.1.1", "198.51.100.10"))).toBe("198.51.100.10");
    expect(mapped(requestFrom("172.32.0.1", "198.51.100.11"))).toBe("172.32.0.1");
    expect(() => createClientIpResolver(["::ffff:10.0.0.0/95"])).toThrow(/SLUICE_TRUST_PROXY/);
  });

  it.each(["10.0.0.0/33", "10.0.0.0/x", "proxy.internal/8", "10.0.0.0/"])(
    "refuses to start with the malformed subnet %j instead of trusting nothing",
    (entry) => {
      expect(() => createClientIpResolver([entry])).toThrow(/SLUICE_TRUST_PROXY/);
    },
  );
});

/**
 * The answers for trusted subnets are remembered per address (10,000, cleared when full): each must
 * hold its own address, not the x-forwarded-for header it was cut from, which the client may fill
 * with up to 16 KiB of entries of its own on the left of the one a proxy appends (V8 keeps the whole
 * string behind a substring of 13 characters or more).
 */
describe("memory kept per trusted-subnet answer", () => {
  const requests = 2000;
  const padding = 15_000;
  let sent = 0;
  /** A new address per request, 13 characters or more. */
  const nextAddress = () => {
    sent++;
    return `198.${100 + ((sent >> 14) & 127)}.${100 + ((sent >> 7) & 127)}.${100 + (sent & 127)}`;
  };

  /** How much the heap grew after `requests` requests through a proxy in `10.0.0.0/8`, each header `pad` on the left. */
  function heapGrowth(resolve: (request: IncomingMessage) => string, pad: string): number {
    const before = heapUsedAfterGc();
    for (let index = 0; index < requests; index++) {
      const address = nextAddress();
      // As Node gives a header: one flat string of its own, not a join of the test's strings.
      const header = detachedString(`${pad}${address}`);
      expect(resolve(requestFrom("10.0.0.1", header))).toBe(address);
    }
    return heapUsedAfterGc() - before;
  }

  it("keeps no x-forwarded-for header behind a remembered address", () => {
    const resolve = createClientIpResolver(["10.0.0.0/8"]);
    heapGrowth(resolve, "");
    const plain = heapGrowth(resolve, "");
    const padded = heapGrowth(resolve, `${"x".repeat(padding)}, `);
    // Kept, each header would add its 15,000 characters (30 MB in all); a tenth of it allows for noise.
    expect(padded - plain).toBeLessThan((requests * padding) / 10);
  });
});

describe("the failed-authentication throttle behind a proxy that writes ports", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      trustProxy: ["127.0.0.1"],
      authFailureLimit: 3,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  const call = (forwardedFor: string, token: string) =>
    proxiedChat(
      sluice.url,
      { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${token}` },
      { headers: { "x-forwarded-for": forwardedFor } },
    );

  it("counts one client once, whatever source port the proxy reports", async () => {
    for (const port of [50001, 50002, 50003]) {
      expect((await call(`198.51.100.7:${port}`, "tk_wrong")).status).toBe(401);
    }
    const throttled = await call("198.51.100.7:50004", project.testKey);
    expect(throttled.status).toBe(429);
    expect(throttled.headers.get("ratelimit-policy")).toBe('"auth-failures";q=3;w=60');
    expect((await call("198.51.100.8:50001", project.testKey)).status).toBe(200);
  });
});
