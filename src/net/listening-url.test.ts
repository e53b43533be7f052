import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { listeningUrl } from "./listening-url.js";

const configured = { host: "127.0.0.1", port: 0 };
const at = (address: string, port: number): AddressInfo => ({
  address,
  port,
  family: address.includes(":") ? "IPv6" : "IPv4",
});

describe("listeningUrl", () => {
  it.each([
    [at("127.0.0.1", 8787), false, "http://127.0.0.1:8787"],
    [at("::1", 41234), false, "http://[::1]:41234"],
    [at("2001:db8::5", 443), true, "https://[2001:db8::5]:443"],
    [at("::", 8787), false, "http://[::]:8787"],
  ])(
    "writes the listening address %j (TLS: %s) as %s, a URL of that host and port",
    (address, secure, expected) => {
      const url = listeningUrl(address, configured, secure);
      expect(url).toBe(expected);
      const parsed = new URL(url);
      expect(parsed.hostname.replace(/^\[|\]$/g, "")).toBe(address.address);
      expect(parsed.port === "" ? (secure ? 443 : 80) : Number(parsed.port)).toBe(address.port);
    },
  );

  it("uses the configured host and port before the server listens, or on a pipe, an IPv6 host bracketed", () => {
    expect(listeningUrl(null, { host: "::1", port: 8787 }, false)).toBe("http://[::1]:8787");
    expect(listeningUrl("/tmp/sluice.sock", { host: "localhost", port: 8787 }, true)).toBe(
      "https://localhost:8787",
    );
  });
});
