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
    end(answer: string) {
      socket.written += answer;
    },
    destroy() {
      socket.destroyed = true;
      socket.emit("close");
    },
  });
  return socket;
}

function capOf(maxPerAddress: number, clock = { now: 0 }) {
  const refusals: { address: string; warn: boolean }[] = [];
  const cap = createConnectionCap({
    maxPerAddress,
    isTrusted: (address) => address === "10.0.0.1",
    generateRequestId: () => "req_test",
    onRefused: (address, warn) => refusals.push({ address, warn }),
    now: () => clock.now,
  });
  const admit = (address: string, encrypted = false) => {
    const socket = fakeSocket(address);
    return { socket, admitted: cap.admit(socket as unknown as Socket, encrypted) };
  };
  return { cap, admit, refusals };
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
