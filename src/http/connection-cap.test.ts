import { EventEmitter } from "node:events";
import type { Socket } from "node:net";
import { describe, expect, it } from "vitest";
import { createConnectionCap } from "./connection-cap.js";

/** A socket as the cap uses it: its peer, `close`, and what was written or destroyed. */
function fakeSocket(remoteAddress: string) {
  const socket = Object.assign(new EventEmitter(), {
    remoteAddress,
    written: "",
    destroyed: false,
    write(answer: string) {
      socket.written += answer;
      return true;
    },
    end(answer?: string) {
      if (answer !== undefined) socket.written += answer;
    },
    resume() {},
    destroy() {
      socket.destroyed = true;
      socket.emit("close");
    },
  });
  return socket;
}

function capOf(maxPerAddress: number, clock = { now: 0 }, maxTotal = 0) {
  const refusals: { address: string; warn: boolean }[] = [];
  const fullRefusals: { address: string; warn: boolean }[] = [];
  const cap = createConnectionCap({
    maxPerAddress,
    maxTotal,
    isTrusted: (address) => address === "10.0.0.1",
    generateRequestId: () => "req_test",
    onRefused: (address, warn) => refusals.push({ address, warn }),
    onFull: (address, warn) => fullRefusals.push({ address, warn }),
    now: () => clock.now,
  });
  const admit = (address: string, encrypted = false) => {
    const socket = fakeSocket(address);
    return { socket, admitted: cap.admit(socket as unknown as Socket, encrypted) };
  };
  return { cap, admit, refusals, fullRefusals };
}

describe("createConnectionCap", () => {
  it("counts per address, a mapped IPv4 as its IPv4, and forgets an address at zero", () => {
    const { cap, admit } = capOf(2);
    const first = admit("192.0.2.1");
    const second = admit("::ffff:192.0.2.1");
    expect([first.admitted, second.admitted]).toEqual([true, true]);
    expect(admit("192.0.2.1").admitted).toBe(false);
    expect(admit("2001:db8::1").admitted).toBe(true);
    expect(cap.openFrom("192.0.2.1")).toBe(2);
    first.socket.emit("close");
    expect(cap.openFrom("192.0.2.1")).toBe(1);
    second.socket.emit("close");
    expect(cap.openFrom("192.0.2.1")).toBe(0);
    expect(cap.addresses()).toBe(1);
  });

  it("counts an IPv6 address with the rest of its /64, as the per-IP limits do", () => {
    const { cap, admit } = capOf(2);
    expect(admit("2001:db8:0:1::a").admitted).toBe(true);
    expect(admit("2001:db8:0:1:ffff::b").admitted).toBe(true);
    // Rotating the address within the block is the same client.
    expect(admit("2001:db8:0:1::c").admitted).toBe(false);
    expect(admit("2001:db8:0:2::a").admitted).toBe(true);
    expect(cap.openFrom("2001:db8:0:1::/64")).toBe(2);
  });

  it("answers a plain connection over the cap 429 and cuts a TLS one", () => {
    const { admit } = capOf(1);
    admit("192.0.2.1");
    const plain = admit("192.0.2.1");
    expect(plain.socket.written).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\n/);
    expect(plain.socket.written).toContain('"requestId":"req_test"');
    expect(plain.socket.destroyed).toBe(false);
    plain.socket.emit("end");
    expect(plain.socket.destroyed).toBe(true);
    const secure = admit("192.0.2.1", true);
    expect(secure.socket.written).toBe("");
    expect(secure.socket.destroyed).toBe(true);
  });

  it("neither counts nor caps a trusted proxy, nor anything when the cap is 0", () => {
    const trusted = capOf(1);
    for (let index = 0; index < 5; index++) expect(trusted.admit("10.0.0.1").admitted).toBe(true);
    expect(trusted.cap.addresses()).toBe(0);
    const off = capOf(0);
    for (let index = 0; index < 5; index++) expect(off.admit("192.0.2.1").admitted).toBe(true);
    expect(off.cap.addresses()).toBe(0);
  });

  it("asks for a warning once per address per minute", () => {
    const clock = { now: 1_000_000 };
    const { admit, refusals } = capOf(1, clock);
    admit("192.0.2.1");
    admit("192.0.2.2");
    admit("192.0.2.1");
    admit("192.0.2.2");
    clock.now += 59_999;
    admit("192.0.2.1");
    clock.now += 1;
    admit("192.0.2.1");
    expect(refusals).toEqual([
      { address: "192.0.2.1", warn: true },
      { address: "192.0.2.2", warn: true },
      { address: "192.0.2.1", warn: false },
      { address: "192.0.2.1", warn: true },
    ]);
  });
});

describe("createConnectionCap: the cap on all connections together (SLUICE_MAX_CONNECTIONS)", () => {
  it("serves as many connections as the cap from any addresses, refuses the next 503, and frees a slot on close", () => {
    const { cap, admit, fullRefusals } = capOf(0, { now: 0 }, 3);
    const held = [admit("192.0.2.1"), admit("192.0.2.2"), admit("2001:db8::1")];
    expect(held.map((connection) => connection.admitted)).toEqual([true, true, true]);
    expect(cap.open()).toBe(3);
    const refused = admit("192.0.2.3");
    expect(refused.admitted).toBe(false);
    expect(refused.socket.written).toMatch(/^HTTP\/1\.1 503 Service Unavailable\r\n/);
    expect(refused.socket.written).toMatch(/\r\nretry-after: 5\r\n/);
    expect(refused.socket.written).toContain('"code":"SERVICE_UNAVAILABLE"');
    expect(refused.socket.written).toContain("SLUICE_MAX_CONNECTIONS");
    expect(refused.socket.written).toContain('"requestId":"req_test"');
    // Refused like a connection over the per-address cap: half-closed, then let go once the client is.
    expect(refused.socket.destroyed).toBe(false);
    refused.socket.emit("end");
    expect(refused.socket.destroyed).toBe(true);
    // A refused connection is not counted, neither while it lingers nor when it closes.
    expect(cap.open()).toBe(3);
    expect(fullRefusals).toEqual([{ address: "192.0.2.3", warn: true }]);

    held[1]?.socket.emit("close");
    expect(cap.open()).toBe(2);
    expect(admit("192.0.2.3").admitted).toBe(true);
    expect(admit("192.0.2.4").admitted).toBe(false);
  });

  it("cuts a TLS connection over it before the handshake", () => {
    const { admit } = capOf(0, { now: 0 }, 1);
    admit("192.0.2.1", true);
    const secure = admit("192.0.2.2", true);
    expect(secure.admitted).toBe(false);
    expect(secure.socket.written).toBe("");
    expect(secure.socket.destroyed).toBe(true);
  });

  it("counts the connections of trusted proxies, which the per-address cap does not", () => {
    const { cap, admit } = capOf(1, { now: 0 }, 3);
    for (let index = 0; index < 3; index++) expect(admit("10.0.0.1").admitted).toBe(true);
    expect(cap.addresses()).toBe(0);
    expect(cap.open()).toBe(3);
    expect(admit("10.0.0.1").admitted).toBe(false);
    expect(admit("192.0.2.1").admitted).toBe(false);
  });

  it("is checked after the per-address cap, whose client gets its own 429, and neither counts a refusal", () => {
    const { cap, admit, refusals, fullRefusals } = capOf(1, { now: 0 }, 2);
    admit("192.0.2.1");
    const overAddress = admit("192.0.2.1");
    expect(overAddress.socket.written).toMatch(/^HTTP\/1\.1 429 /);
    expect(cap.open()).toBe(1);
    expect(cap.openFrom("192.0.2.1")).toBe(1);
    admit("192.0.2.2");
    const overTotal = admit("192.0.2.3");
    expect(overTotal.socket.written).toMatch(/^HTTP\/1\.1 503 /);
    // Refused by the total cap: the address holds nothing.
    expect(cap.openFrom("192.0.2.3")).toBe(0);
    expect(cap.addresses()).toBe(2);
    expect(refusals).toHaveLength(1);
    expect(fullRefusals).toHaveLength(1);
  });

  it("caps nothing and counts nothing at 0", () => {
    const { cap, admit } = capOf(0, { now: 0 }, 0);
    for (let index = 0; index < 10; index++) expect(admit("10.0.0.1").admitted).toBe(true);
    expect(cap.open()).toBe(0);
  });

  it("asks for a warning once a minute, whichever addresses are refused", () => {
    const clock = { now: 1_000_000 };
    const { admit, fullRefusals } = capOf(0, clock, 1);
    admit("192.0.2.1");
    admit("192.0.2.2");
    admit("192.0.2.3");
    clock.now += 59_999;
    admit("192.0.2.4");
    clock.now += 1;
    admit("192.0.2.5");
    expect(fullRefusals.map((refusal) => refusal.warn)).toEqual([true, false, false, true]);
  });
});
