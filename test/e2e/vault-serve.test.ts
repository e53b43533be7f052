import {
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** Serving the local vault's files at their signed URLs, to browsers and apps (docs/images.md). */
describe("the local vault's signed URLs", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerCBaseUrl: `${fake.url}/c/v1beta`, vaultUrlTtlSeconds: 3600 });
    project = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "team7",
      saveImagesToVault: true,
    });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  /** A freshly generated image: its signed URL and its file in the vault. */
  async function stored(): Promise<{ url: URL; file: string }> {
    const response = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-c")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a lighthouse" }),
    });
    expect(response.status).toBe(200);
    const [image] = ((await response.json()) as { images: Array<{ url: string; path: string }> }).images;
    return { url: new URL(image!.url), file: join(sluice.gateway.config.dataDir, "vault", image!.path) };
  }

  /**
   * A client that sends its request and reads nothing of the answer after its first bytes, as a slow
   * or stalled client (or one holding many connections on purpose) does.
   */
  function stalledClient(url: URL): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () =>
        socket.write(`GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`),
      );
      socket.once("data", () => {
        socket.pause();
        resolve(socket);
      });
      socket.once("error", reject);
    });
  }

  /** How many of this process's open files are `file` (Linux: /proc/self/fd). */
  function openCount(file: string): number {
    return readdirSync("/proc/self/fd").filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === file;
      } catch {
        return false;
      }
    }).length;
  }

  it("holds no more than a chunk of a large file in memory per client that does not read its answer", {
    timeout: 30_000,
  }, async () => {
    const { url, file } = await stored();
    const size = 16 * 1024 * 1024;
    writeFileSync(file, Buffer.alloc(size, 7));
    const before = process.memoryUsage().arrayBuffers;
    const clients = await Promise.all(Array.from({ length: 12 }, () => stalledClient(url)));
    try {
      // The server writes what the connections take, then waits on them.
      await sleep(300);
      const held = process.memoryUsage().arrayBuffers - before;
      // Read whole, each answer holds the file's 16 MiB until its client has read it all: 192 MiB.
      expect(held).toBeLessThan(size * 3);
    } finally {
      for (const client of clients) client.destroy();
    }
    // The file is still served whole to a client that reads it.
    const fetched = await fetch(url);
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get("content-length")).toBe(String(size));
    expect((await fetched.arrayBuffer()).byteLength).toBe(size);
  });

  it.skipIf(process.platform !== "linux")(
    "closes the file when a client leaves in the middle of its answer, and after a HEAD",
    async () => {
      const { url, file } = await stored();
      writeFileSync(file, Buffer.alloc(32 * 1024 * 1024, 7));
      const clients = await Promise.all(Array.from({ length: 4 }, () => stalledClient(url)));
      await sleep(100);
      expect(openCount(file)).toBe(4);
      for (const client of clients) client.destroy();
      await expect.poll(() => openCount(file)).toBe(0);
      const head = await fetch(url, { method: "HEAD" });
      expect(head.status).toBe(200);
      expect(head.headers.get("content-length")).toBe(String(32 * 1024 * 1024));
      expect(head.headers.get("content-type")).toBe("image/png");
      expect(openCount(file)).toBe(0);
    },
  );

  // A file cut short while it is served (truncated by an operator's cleanup, a disk error) cannot
  // give the bytes its Content-Length promised: the client must see its answer cut short at once,
  // not wait on a connection that keeps alive, and the operator must see why, once.
  it("cuts the answer short and logs the failure once, without the URL, when the file is truncated while served", {
    timeout: 20_000,
  }, async () => {
    const { url, file } = await stored();
    const size = 8 * 1024 * 1024;
    writeFileSync(file, Buffer.alloc(size, 7));
    const from = sluice.logs.length;
    const client = await stalledClient(url);
    let received = 0;
    const closed = new Promise<void>((resolve) => client.once("close", () => resolve()));
    client.on("data", (chunk: Buffer) => {
      received += chunk.length;
    });
    truncateSync(file, 1024 * 1024);
    client.resume();
    const closedInTime = await Promise.race([closed.then(() => true), sleep(5000).then(() => false)]);
    client.destroy();
    expect(closedInTime).toBe(true);
    expect(received).toBeLessThan(size);
    const failures = logLinesOf(sluice, from).filter((line) => line.msg === "vault read failed");
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({
      level: "warn",
      dependency: "vault",
      code: "ERR_VAULT_FILE_TRUNCATED",
      route: "/v1/vault/*",
    });
    if (process.platform === "linux") await expect.poll(() => openCount(file)).toBe(0);
    expect(failures[0]?.requestId).toEqual(expect.any(String));
    const written = sluice.logs.slice(from).join("\n");
    expect(written).not.toContain(url.searchParams.get("signature") as string);
    expect(written).not.toContain("expires=");
  });

  it("logs nothing when a client leaves in the middle of its answer", async () => {
    const { url, file } = await stored();
    writeFileSync(file, Buffer.alloc(8 * 1024 * 1024, 7));
    const from = sluice.logs.length;
    const client = await stalledClient(url);
    client.destroy();
    await sleep(200);
    expect(logLinesOf(sluice, from).filter((line) => line.level !== "debug")).toEqual([]);
  });

  it("serves a small file whole, with its type and nosniff", async () => {
    const { url } = await stored();
    const fetched = await fetch(url);
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get("content-type")).toBe("image/png");
    expect(fetched.headers.get("x-content-type-options")).toBe("nosniff");
    expect(fetched.headers.get("content-length")).toBe(String(tinyPng.length));
    expect(Buffer.from(await fetched.arrayBuffer()).equals(tinyPng)).toBe(true);
  });

  // Files are never rewritten (a new image gets a new name), so a browser or app that cached one
  // can revalidate it once its max-age (5 minutes at most) has passed, without fetching it again.
  it("answers 304 to a client revalidating a copy it holds, by ETag or by date", async () => {
    const { url, file } = await stored();
    const first = await fetch(url);
    expect(first.status).toBe(200);
    const etag = first.headers.get("etag");
    const lastModified = first.headers.get("last-modified");
    expect(etag).toMatch(/^"[0-9a-f]+-[0-9a-f]+"$/);
    expect(lastModified).toBe(statSync(file).mtime.toUTCString());
    // Node's fetch keeps no cache: each answer is the gateway's own.
    const revalidate = (headers: Record<string, string>, target: URL = url) => fetch(target, { headers });
    for (const headers of <Array<Record<string, string>>>[
      { "if-none-match": etag as string },
      { "if-none-match": `"other", W/${etag}` },
      { "if-none-match": "*" },
      { "if-modified-since": lastModified as string },
      { "if-modified-since": new Date(Date.now() + 60_000).toUTCString() },
    ]) {
      const answer = await revalidate(headers);
      expect(answer.status, JSON.stringify(headers)).toBe(304);
      expect(answer.headers.get("etag")).toBe(etag);
      expect(answer.headers.get("cache-control")).toMatch(/^private, max-age=\d+$/);
      expect(await answer.text()).toBe("");
    }
    // Another copy, an older one, or a date that is none: the file, whole.
    for (const headers of <Array<Record<string, string>>>[
      { "if-none-match": '"other"' },
      { "if-modified-since": new Date(statSync(file).mtimeMs - 60_000).toUTCString() },
      { "if-modified-since": "yesterday" },
      // If-None-Match decides alone when both are sent (RFC 9110 §13.1.3).
      { "if-none-match": '"other"', "if-modified-since": lastModified as string },
    ]) {
      const answer = await revalidate(headers);
      expect(answer.status, JSON.stringify(headers)).toBe(200);
      expect(Buffer.from(await answer.arrayBuffer()).equals(tinyPng)).toBe(true);
    }
    // The URL is checked first: a tampered one gets no 304, whatever the client holds.
    const tampered = new URL(url);
    tampered.searchParams.set("signature", "A".repeat(43));
    expect((await revalidate({ "if-none-match": etag as string }, tampered)).status).toBe(403);
  });

  /** The status of a request sent as written, the target unnormalized (fetch resolves `..`). */
  function statusOf(target: string, method = "GET", headers = ""): Promise<number> {
    const { port, hostname } = new URL(sluice.url);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () =>
        socket.write(`${method} ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${headers}\r\n`),
      );
      let answer = "";
      socket.on("data", (chunk: Buffer) => {
        answer += chunk.toString("latin1");
      });
      socket.once("close", () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1])));
      socket.once("error", reject);
    });
  }

  it("refuses every change to a signed URL but the spellings of its own path, with 403", async () => {
    const { url } = await stored();
    const { url: other } = await stored();
    const { pathname, search } = url;
    const expires = url.searchParams.get("expires") as string;
    const issued = url.searchParams.get("issued") as string;
    const signature = url.searchParams.get("signature") as string;
    const signed = (expiry: string, signedAt: string, signature: string) =>
      `${pathname}?expires=${expiry}&issued=${signedAt}&signature=${signature}`;
    const refused = [
      `${other.pathname}${search}`,
      `${pathname.replace(".png", ".PNG")}${search}`,
      `${pathname.replace("/generated-images", "//generated-images")}${search}`,
      `${pathname}%00${search}`,
      `${pathname};x${search}`,
      `${pathname}/${"a".repeat(4000)}${search}`,
      `/v1/vault/team7/generated-images/../../master.key${search}`,
      `/v1/vault/team7/%2e%2e/%2e%2e/master.key${search}`,
      `${pathname}?signature=${"A".repeat(43)}&expires=${expires}&issued=${issued}&signature=${signature}`,
      `${pathname}?EXPIRES=${expires}&issued=${issued}&signature=${signature}`,
      signed(expires, issued, `${signature}=`),
      signed(expires, issued, `${signature}%00`),
      signed(String(Number(expires) + 1), issued, signature),
      signed("-1", issued, signature),
      signed("never", issued, signature),
      signed(expires, String(Number(issued) - 1), signature),
      signed(expires, "-1", signature),
      // Without its signing second: a URL signed before it was added is signed otherwise.
      `${pathname}?expires=${expires}&signature=${signature}`,
      `${pathname}?expires=${expires}&issued=${issued}`,
      pathname,
    ];
    for (const target of refused) expect(await statusOf(target), target).toBe(403);
    // The same path spelled otherwise (decoded, as the signature covers it), or beside parameters
    // the signature does not cover: the same file, still only until the URL's expiry.
    for (const target of [
      `${pathname}/${search}`,
      `${pathname.replace("generated", "%67enerated")}${search}`,
      `${pathname}${search}&download=1`,
    ])
      expect(await statusOf(target), target).toBe(200);
  });

  // Sluice never makes a link in the vault; one made there by whoever can write to it must not turn
  // a signed URL into a read of the data dir's database (or master key).
  it("never serves the target of a symbolic link in a vault file's place: 503, logged as ELOOP", async () => {
    const { url, file } = await stored();
    rmSync(file);
    symlinkSync(join(sluice.gateway.config.dataDir, "sluice.sqlite"), file);
    const from = sluice.logs.length;
    for (const method of ["GET", "HEAD"]) {
      const answer = await fetch(url, { method });
      expect(answer.status, method).toBe(503);
      expect(answer.headers.get("content-type"), method).toMatch(/^application\/json/);
      expect(answer.headers.get("etag"), method).toBeNull();
      expect(await answer.text(), method).not.toContain("SQLite");
    }
    // Once per code and window (the HEAD's is counted into it).
    const failures = logLinesOf(sluice, from).filter((line) => line.msg === "vault call failed");
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ level: "warn", dependency: "vault", code: "ELOOP", status: 503 });
  });

  it("answers GET and HEAD only (405 with Allow otherwise)", async () => {
    const { url } = await stored();
    const target = `${url.pathname}${url.search}`;
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const answer = await fetch(url, { method });
      expect(answer.status, method).toBe(405);
      expect(answer.headers.get("allow")).toBe("GET, HEAD");
    }
    expect(await statusOf(target, "HEAD")).toBe(200);
  });

  /** A file of `size` known bytes (byte i is i % 251) in place of a freshly generated image. */
  async function storedBytes(size: number): Promise<{ url: URL; bytes: Buffer }> {
    const { url, file } = await stored();
    const bytes = Buffer.from(Array.from({ length: size }, (_, i) => i % 251));
    writeFileSync(file, bytes);
    return { url, bytes };
  }

  // RFC 9110 §14: a player or a resumed download asks for part of the file.
  it("answers a single byte range with 206 and that part, and says it takes ranges", async () => {
    const { url, bytes } = await storedBytes(1000);
    const whole = await fetch(url);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("accept-ranges")).toBe("bytes");
    await whole.arrayBuffer();
    for (const [range, first, last] of <Array<[string, number, number]>>[
      ["bytes=0-99", 0, 99],
      ["bytes=100-", 100, 999],
      ["bytes=-10", 990, 999],
      ["bytes=990-5000", 990, 999],
      ["bytes=999-999", 999, 999],
      ["bytes=-5000", 0, 999],
      ["BYTES=5-9", 5, 9],
    ]) {
      const answer = await fetch(url, { headers: { range } });
      expect(answer.status, range).toBe(206);
      expect(answer.headers.get("content-range"), range).toBe(`bytes ${first}-${last}/1000`);
      expect(answer.headers.get("content-length"), range).toBe(String(last - first + 1));
      expect(answer.headers.get("content-type")).toBe("image/png");
      expect(answer.headers.get("x-content-type-options")).toBe("nosniff");
      expect(answer.headers.get("etag")).toBe(whole.headers.get("etag"));
      expect(answer.headers.get("accept-ranges")).toBe("bytes");
      expect(Buffer.from(await answer.arrayBuffer()).equals(bytes.subarray(first, last + 1)), range).toBe(
        true,
      );
    }
  });

  it("answers 416 with the file's size to a range that starts past its end, or asks for no bytes, saying which", async () => {
    const { url } = await storedBytes(1000);
    const pastEnd = "The range asked for starts at or past the end of this 1000-byte file";
    for (const [range, message] of [
      ["bytes=1000-", pastEnd],
      ["bytes=5000-6000", pastEnd],
      ["bytes=-0", "The range asked for is the last 0 bytes of this 1000-byte file: ask for at least one"],
    ] as const) {
      const answer = await fetch(url, { headers: { range } });
      expect(answer.status, range).toBe(416);
      expect(answer.headers.get("content-range"), range).toBe("bytes */1000");
      expect(answer.headers.get("content-type"), range).toBe("application/json; charset=utf-8");
      expect(
        ((await answer.json()) as { error: { code: string; message: string } }).error,
        range,
      ).toMatchObject({
        code: "RANGE_NOT_SATISFIABLE",
        message,
      });
    }
    // The connection serves the next request after it.
    const target = `${url.pathname}${url.search}`;
    expect(await statusOf(target, "GET", "Range: bytes=2000-\r\n")).toBe(416);
  });

  it("answers the whole file, 200, to several ranges, a range it cannot read, or a HEAD", async () => {
    const { url, bytes } = await storedBytes(1000);
    for (const range of [
      "bytes=0-1,5-6",
      "bytes=0-1, 5-6",
      "bytes=5-1",
      "bytes=a-b",
      "bytes=-",
      "items=0-1",
      "bytes 0-1",
      "bytes=0x1-2",
      "",
    ]) {
      const answer = await fetch(url, { headers: { range } });
      expect(answer.status, range).toBe(200);
      expect(answer.headers.get("content-range"), range).toBeNull();
      expect(Buffer.from(await answer.arrayBuffer()).equals(bytes), range).toBe(true);
    }
    // Range is for GET only (RFC 9110 §14.2).
    const head = await fetch(url, { method: "HEAD", headers: { range: "bytes=0-9" } });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-length")).toBe("1000");
    expect(head.headers.get("accept-ranges")).toBe("bytes");
  });

  // A client resuming a download sends the tag of the copy it has part of: if the file is another
  // now, it gets the whole of it, never a part of another to splice onto its own.
  it("honours If-Range: the part when it names the file's ETag, else the whole file", async () => {
    const { url, bytes } = await storedBytes(1000);
    const etag = (await fetch(url, { method: "HEAD" })).headers.get("etag") as string;
    const part = await fetch(url, { headers: { range: "bytes=10-19", "if-range": etag } });
    expect(part.status).toBe(206);
    expect(Buffer.from(await part.arrayBuffer()).equals(bytes.subarray(10, 20))).toBe(true);
    for (const ifRange of ['"other"', `W/${etag}`, new Date(Date.now() + 60_000).toUTCString(), "junk"]) {
      const answer = await fetch(url, { headers: { range: "bytes=10-19", "if-range": ifRange } });
      expect(answer.status, ifRange).toBe(200);
      expect(Buffer.from(await answer.arrayBuffer()).equals(bytes), ifRange).toBe(true);
    }
    // Nor does If-Range make a range that starts past the end answerable: the whole file.
    const past = await fetch(url, { headers: { range: "bytes=5000-", "if-range": '"other"' } });
    expect(past.status).toBe(200);
    await past.arrayBuffer();
  });

  it("answers 304 before a range to a client whose copy is current", async () => {
    const { url } = await storedBytes(1000);
    const etag = (await fetch(url, { method: "HEAD" })).headers.get("etag") as string;
    const answer = await fetch(url, { headers: { range: "bytes=0-9", "if-none-match": etag } });
    expect(answer.status).toBe(304);
  });
});
