import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  connectionCapWarnings,
  defaultMaxConnections,
  fallbackMaxConnections,
  parseOpenFileLimit,
  readOpenFileLimit,
} from "./open-file-limit.js";

/** /proc/self/limits as Linux writes it, with `files` for its "Max open files" soft and hard limits. */
function limitsText(soft: string, hard: string): string {
  return [
    "Limit                     Soft Limit           Hard Limit           Units     ",
    "Max cpu time              unlimited            unlimited            seconds   ",
    "Max file size             unlimited            unlimited            bytes     ",
    "Max stack size            8388608              unlimited            bytes     ",
    "Max processes             96364                96364                processes ",
    `Max open files            ${soft.padEnd(21)}${hard.padEnd(21)}files     `,
    "Max locked memory         8388608              8388608              bytes     ",
    "Max realtime timeout      unlimited            unlimited            us        ",
    "",
  ].join("\n");
}

describe("parseOpenFileLimit", () => {
  it("reads the soft limit of Max open files, not the hard one nor another line's", () => {
    expect(parseOpenFileLimit(limitsText("65536", "1048576"))).toBe(65536);
    expect(parseOpenFileLimit(limitsText("1024", "1024"))).toBe(1024);
  });

  it("answers null for an unlimited soft limit, a missing line or text that is not the table", () => {
    expect(parseOpenFileLimit(limitsText("unlimited", "unlimited"))).toBeNull();
    expect(parseOpenFileLimit(limitsText("unlimited", "4096"))).toBeNull();
    expect(
      parseOpenFileLimit(limitsText("1024", "1024").replace("Max open files", "Max open filez")),
    ).toBeNull();
    expect(parseOpenFileLimit("")).toBeNull();
    expect(parseOpenFileLimit(limitsText("0", "0"))).toBeNull();
    expect(parseOpenFileLimit(limitsText("12ab", "4096"))).toBeNull();
  });
});

describe("readOpenFileLimit", () => {
  it.runIf(process.platform === "linux")(
    "reads the limit the process runs with, as a shell it starts sees it",
    () => {
      const shell = execFileSync("sh", ["-c", "ulimit -n"], { encoding: "utf8" }).trim();
      expect(readOpenFileLimit()).toBe(shell === "unlimited" ? null : Number(shell));
    },
  );
});

describe("defaultMaxConnections", () => {
  it("leaves a reserve of a tenth of the limit (at least 256) and half the rest for outbound sockets", () => {
    expect(defaultMaxConnections(1_048_576)).toBe(471_859);
    expect(defaultMaxConnections(65_536)).toBe(29_491);
    expect(defaultMaxConnections(20_000)).toBe(9000);
    // A tenth of 1024 is under 256: the reserve is 256.
    expect(defaultMaxConnections(1024)).toBe(384);
  });

  it("keeps a reserve of at most half a small limit, and never answers 0 (no cap)", () => {
    expect(defaultMaxConnections(256)).toBe(64);
    expect(defaultMaxConnections(3)).toBe(1);
    expect(defaultMaxConnections(1)).toBe(1);
  });

  it("falls back to a constant where the limit cannot be read", () => {
    expect(defaultMaxConnections(null)).toBe(fallbackMaxConnections);
    expect(fallbackMaxConnections).toBe(4096);
  });
});

describe("connectionCapWarnings", () => {
  it("warns when SLUICE_MAX_CONNECTIONS leaves the process less than its reserve of descriptors", () => {
    // 65,536 files keep a reserve of 6,554: 58,982 connections at most.
    expect(connectionCapWarnings(58_982, 65_536)).toEqual([]);
    const [warning, ...more] = connectionCapWarnings(58_983, 65_536);
    expect(more).toEqual([]);
    expect(warning?.fields).toEqual({ maxConnections: 58_983, openFileLimit: 65_536 });
    expect(warning?.message).toContain("SLUICE_MAX_CONNECTIONS is 58983");
    expect(warning?.message).toContain("set SLUICE_MAX_CONNECTIONS to 58982 or less (unset, it is 29491)");
  });

  it("says nothing when the setting is unset or 0 (no cap), or the limit is unknown", () => {
    expect(connectionCapWarnings(undefined, 1024)).toEqual([]);
    expect(connectionCapWarnings(0, 1024)).toEqual([]);
    expect(connectionCapWarnings(1_000_000, null)).toEqual([]);
  });
});
