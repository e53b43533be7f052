import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminToken, logLinesOf, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * The access line (`request`, at debug) quotes the path a client wrote, which Node takes up to its
 * 16 KiB of head: a line per request of that size would let any client, without credentials, make
 * each of its requests cost the log ~16 KiB instead of ~250 bytes (audit: adv-observe).
 */
describe("the access line of a long path", () => {
  let sluice: TestGateway;
  beforeAll(async () => {
    sluice = await startTestGateway({ logLevel: "debug" });
  });
  afterAll(async () => {
    await sluice.close();
  });

  async function accessLineOf(
    path: string,
    init: RequestInit = {},
  ): Promise<{ line: string; entry: Record<string, unknown> }> {
    const from = sluice.logs.length;
    const response = await fetch(`${sluice.url}${path}`, init);
    await response.arrayBuffer();
    expect(response.status).toBe(404);
    const requestId = response.headers.get("x-request-id");
    // The line is written when the response closes, which may come just after the client read it.
    for (let wait = 0; wait < 50; wait++) {
      const index = logLinesOf(sluice, from).findIndex((entry) => entry.requestId === requestId);
      if (index >= 0) {
        const line = sluice.logs[from + index] as string;
        return { line, entry: JSON.parse(line) as Record<string, unknown> };
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`no access line for ${requestId}`);
  }

  it("shows the start of the path and its length, not all of it", async () => {
    const path = `/${"a".repeat(12_000)}`;
    const { line, entry } = await accessLineOf(path);
    expect(entry).toMatchObject({ msg: "request", route: "not-found", status: 404 });
    const shown = entry.path as string;
    expect(shown.startsWith(`/${"a".repeat(1000)}`)).toBe(true);
    expect(shown.endsWith("… (12001 characters)")).toBe(true);
    expect(line.length).toBeLessThan(1500);
  });

  it("shows a short path whole", async () => {
    const path = `/nope/${"b".repeat(900)}`;
    expect((await accessLineOf(path)).entry.path).toBe(path);
  });

  it("cuts a long path after its keys are redacted, so no start of a key is left at the cut", async () => {
    const key = `sk-proj-${"K".repeat(40)}`;
    // The key begins 1,000 characters in: a cut at the shown length would keep its first 24.
    const path = `/${"a".repeat(998)}/${key}/${"z".repeat(3000)}`;
    const { line } = await accessLineOf(path);
    expect(line).not.toContain("sk-proj-KKKK");
    expect(line).toContain("[redacted]");
  });

  // A project id longer than any (64 characters) may be a secret typed in its place: the answer and
  // the usage row show only its start and length (`mayBeKey`), and so must the access line. A
  // DeviceCheck Bearer value (`partial key.device token`) there left the token in the line, behind
  // the partial key's `[redacted]`.
  it("shows a project id that may be a key by its start and length, as the answer does", async () => {
    const token = `AgAAA${"Zm9vYmFy".repeat(40)}+x/y=`.replaceAll("/", "Q");
    const bearer = `sk_sluice_0123456789ab_${"S".repeat(40)}.${token}`;
    const post = {
      method: "POST",
      headers: {
        authorization: "Bearer sk_sluice_0123456789ab_AAAA.tk_x",
        "content-type": "application/json",
      },
      body: "{}",
    };
    for (const path of [
      `/v1/provider-a/${bearer}/chat/completions`,
      `/v1/text/${encodeURIComponent(bearer)}`,
      `/admin/v1/projects/${token}`,
    ]) {
      const admin = { headers: { authorization: `Bearer ${adminToken}` } };
      const { line, entry } = await accessLineOf(path, path.startsWith("/admin") ? admin : post);
      expect(line).not.toContain(token.slice(5, 30));
      expect(entry.path).toMatch(/… \(\d+ characters\)/);
    }
    // An id of a project's length is shown whole.
    const { entry } = await accessLineOf("/v1/text/prj_nope", post);
    expect(entry.path).toBe("/v1/text/prj_nope");
  });

  // The path stays percent-encoded in the line, and a key's form was taken only where no letter or
  // digit came before it: the hex digit of a `%20` (`Bearer …`), a `%22` (a key pasted with its
  // quotes) or a `%3D` (a `?key=` its client encoded into the path) left the key whole in the line.
  it("redacts a key behind a percent-encoded character: a space, a quote, an encoded ?key=", async () => {
    const partialKey = `sk_sluice_0123456789ab_${"S".repeat(40)}`;
    const testKey = `tk_${"T".repeat(43)}`;
    for (const path of [
      `/nope/Bearer%20${partialKey}.${testKey}`,
      `/nope/%22${partialKey}%22`,
      `/v1/provider-c/prj_nope/v1beta/models/gemini-2.5-flash:generateContent%3Fkey%3D${partialKey}`,
    ]) {
      const { line } = await accessLineOf(path, {
        method: "POST",
        headers: { "x-goog-api-key": "sk_sluice_0123456789ab_AAAA.tk_x" },
      });
      expect(line, path).not.toContain("SSSSSSSSSSSS");
      expect(line, path).not.toContain("TTTTTTTTTTTT");
      expect(line, path).toContain("[redacted]");
    }
  });

  // A DeviceCheck Bearer value (`partial key.device token`) pasted into the path elsewhere than the
  // project id's place: the partial key was redacted, the device token behind its `.` written
  // whole. A device token has no form of its own (base64: `/`, `+` and `=` as they are or
  // percent-encoded), but behind a key's form and a `.` it is the rest of the credential.
  it("redacts the device token behind a partial key's dot, as it is or percent-encoded", async () => {
    const partialKey = `sk_sluice_0123456789ab_${"S".repeat(40)}`;
    // 1,500 bytes of every value: a real token's size, with `/`, `+` and `=` in its base64.
    const token = Buffer.from(Array.from({ length: 1500 }, (_, i) => (i * 37) % 256)).toString("base64");
    expect(token).toMatch(/\/.*\+|\+.*\//);
    for (const [path, written] of [
      [`/nope/Bearer%20${partialKey}.${token}`, token],
      [`/nope/Bearer%20${partialKey}.${encodeURIComponent(token)}/more`, encodeURIComponent(token)],
      [`/nope/${partialKey}.${token.replace(/[/+=]/g, "A")}`, token.replace(/[/+=]/g, "A")],
    ] as const) {
      const { line } = await accessLineOf(path, { method: "POST" });
      for (let at = 0; at + 10 <= written.length; at += 5)
        expect(line, path).not.toContain(written.slice(at, at + 10));
      expect(line, path).toContain("/nope/");
      expect(line, path).toContain("[redacted]");
    }
  });
});
