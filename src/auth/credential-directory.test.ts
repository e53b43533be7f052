import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { beforeTimer } from "../../test/support/before-timer.js";
import { providerKeyAad } from "../admin/project-admin.js";
import { reloadWaitMs } from "../storage/database-unavailable.js";
import type { KeyRepository, ProviderKeyRecord } from "../storage/key-repository.js";
import type { Project, ProjectRepository } from "../storage/project-repository.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { createSecretBox } from "./secret-box.js";

const record = (sealedServerShare: string): ProviderKeyRecord => ({
  id: "key000000001",
  projectId: "p1",
  provider: "provider-a",
  label: null,
  sealedServerShare,
  clientShareDigest: "ab".repeat(32),
  createdAt: "2026-11-01T00:00:00.000Z",
  revokedAt: null,
});

function directory(getProviderKey: KeyRepository["getProviderKey"], get: ProjectRepository["get"]) {
  return createCredentialDirectory({
    projects: { get } as ProjectRepository,
    keys: { getProviderKey } as KeyRepository,
    secretBox: createSecretBox(randomBytes(32)),
    ttlMs: 1000,
  });
}

describe("credential directory", () => {
  it("decrypts a server share only when it is asked for (after the caller's digest matched), and once", async () => {
    const secretBox = createSecretBox(randomBytes(32));
    const sealed = secretBox.seal(Buffer.from("share"), providerKeyAad("p1", "provider-a", "key000000001"));
    let opens = 0;
    const counting = {
      ...secretBox,
      open: (...args: Parameters<typeof secretBox.open>) => {
        opens++;
        return secretBox.open(...args);
      },
    };
    const keys = createCredentialDirectory({
      projects: { get: async () => null } as unknown as ProjectRepository,
      keys: { getProviderKey: async () => record(sealed) } as unknown as KeyRepository,
      secretBox: counting,
      ttlMs: 1000,
    });
    const key = await keys.key("key000000001");
    expect(opens).toBe(0);
    expect(key?.serverShare().toString()).toBe("share");
    key?.serverShare();
    expect(opens).toBe(1);
  });

  it("keeps an opened server share in memory of its own, not in a slab of Buffer's shared pool", async () => {
    const secretBox = createSecretBox(randomBytes(32));
    const share = randomBytes(48);
    const sealed = secretBox.seal(share, providerKeyAad("p1", "provider-a", "key000000001"));
    const key = await createCredentialDirectory({
      projects: { get: async () => null } as unknown as ProjectRepository,
      keys: { getProviderKey: async () => record(sealed) } as unknown as KeyRepository,
      secretBox,
      ttlMs: 1000,
    }).key("key000000001");
    const opened = key?.serverShare() as Buffer;
    expect(opened.equals(share)).toBe(true);
    // A view of the pool would keep its whole 8 KiB slab (whatever else was cut from it) for as long
    // as the cache holds the key: up to 10,000 keys.
    expect(opened.buffer.byteLength).toBe(share.length);
  });

  it("does not call a share sealed under another master key a database outage", async () => {
    const otherBox = createSecretBox(randomBytes(32));
    const sealed = otherBox.seal(Buffer.from("share"), providerKeyAad("p1", "provider-a", "key000000001"));
    const error = await directory(
      async () => record(sealed),
      async () => null,
    )
      .key("key000000001")
      .then((key) => key?.serverShare())
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toHaveProperty("code", "SERVICE_UNAVAILABLE");
    expect((error as Error).message).toMatch(/key000000001 does not open with this master key/);
  });

  it("answers SERVICE_UNAVAILABLE when the database cannot be reached and nothing is cached", async () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    const error = await directory(
      async () => null,
      async () => {
        throw refused;
      },
    )
      .project("p1")
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
  });

  it("serves a record while the database is down only until it is maxStaleMs old, then answers 503", async () => {
    let clock = 0;
    let down = false;
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    const cache = createCredentialDirectory({
      projects: {
        get: async (id: string) => {
          if (down) throw refused;
          return { id, name: "read" };
        },
      } as unknown as ProjectRepository,
      keys: {} as KeyRepository,
      secretBox: createSecretBox(randomBytes(32)),
      ttlMs: 1000,
      maxStaleMs: 10_000,
      now: () => clock,
    });
    expect(await cache.project("p1")).toMatchObject({ name: "read" });
    down = true;
    // Stale-if-error: a failed reload does not make the record any younger (it did before, for ever).
    for (clock = 1000; clock < 10_000; clock += 700)
      expect(await cache.project("p1")).toMatchObject({ name: "read" });
    expect(cache.readAt("p1", null)).toBe(0);
    clock = 9_999;
    expect(cache.holdsProjects()).toBe(true);
    clock = 10_000;
    await expect(cache.project("p1")).rejects.toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
    clock = 10_500; // between retries too
    await expect(cache.project("p1")).rejects.toMatchObject({ code: "SERVICE_UNAVAILABLE" });
    expect(cache.holdsProjects()).toBe(false);
    down = false;
    clock = 12_000;
    expect(await cache.project("p1")).toMatchObject({ name: "read" });
    expect(cache.readAt("p1", null)).toBe(12_000);
  });

  it("drops only the changed project's key records on an admin change", async () => {
    let reads = 0;
    const keyOf = (id: string, projectId: string): ProviderKeyRecord => ({
      ...record("v1.x"),
      id,
      projectId,
    });
    const cache = directory(
      async (id) => {
        reads++;
        return keyOf(id, id === "keyA00000001" ? "pa" : "pb");
      },
      async () => null,
    );
    await cache.key("keyA00000001");
    await cache.key("keyB00000001");
    expect(reads).toBe(2);
    cache.invalidate("pb");
    await cache.key("keyA00000001");
    expect(reads).toBe(2);
    await cache.key("keyB00000001");
    expect(reads).toBe(3);
  });

  it("passes any other failure on as it is", async () => {
    const bug = new TypeError("Cannot read properties of undefined (reading 'id')");
    const error = await directory(
      async () => null,
      async () => {
        throw bug;
      },
    )
      .project("p1")
      .catch((caught: unknown) => caught);
    expect(error).toBe(bug);
  });

  it("serves a stale record after reloadWaitMs while its reload hangs, then the reloaded one", async () => {
    let clock = 0;
    const answers: Array<(name: string) => void> = [];
    const projects = createCredentialDirectory({
      projects: {
        get: (id: string) =>
          answers.length === 0
            ? Promise.resolve({ id, name: "first" })
            : new Promise((resolve) => answers.push((name) => resolve({ id, name }))),
      } as unknown as ProjectRepository,
      keys: {} as KeyRepository,
      secretBox: createSecretBox(randomBytes(32)),
      ttlMs: 1000,
      now: () => clock,
    });
    answers.length = 0;
    expect(await projects.project("p1")).toMatchObject({ name: "first" });
    answers.push(() => {}); // from here on, reads wait until answered
    clock = 2000;
    // A database that hangs: every caller gets the record it had after reloadWaitMs, one read for all.
    // Told by the order of events: before a timer of twice reloadWaitMs, set at the same time, fires.
    const both = await beforeTimer(
      Promise.all([projects.project("p1"), projects.project("p1")]),
      2 * reloadWaitMs,
    );
    expect(both).toMatchObject([{ name: "first" }, { name: "first" }]);
    expect(answers).toHaveLength(2);
    // Meanwhile later callers get it at once: not after a wait of their own.
    expect(await beforeTimer(projects.project("p1"), reloadWaitMs / 2)).toMatchObject({ name: "first" });
    // The reload answers: its record replaces the stale one.
    answers[1]?.("second");
    await new Promise((resolve) => setImmediate(resolve));
    expect(await projects.project("p1")).toMatchObject({ name: "second" });
  });

  it("waits for a stale record's reload that answers in time, and drops a reload that an invalidation overtook", async () => {
    let clock = 0;
    let name = "first";
    let release: (() => void) | null = null;
    const projects = createCredentialDirectory({
      projects: {
        get: async (id: string) => {
          const read = name;
          if (release === null) return { id, name: read };
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          return { id, name: read };
        },
      } as unknown as ProjectRepository,
      keys: {} as KeyRepository,
      secretBox: createSecretBox(randomBytes(32)),
      ttlMs: 1000,
      now: () => clock,
    });
    expect(await projects.project("p1")).toMatchObject({ name: "first" });
    name = "second";
    clock = 2000;
    expect(await projects.project("p1")).toMatchObject({ name: "second" });
    // A slow reload that reads the old record, then an admin change invalidates the project.
    clock = 4000;
    release = () => {};
    const stale = projects.project("p1");
    await new Promise((resolve) => setTimeout(resolve, reloadWaitMs + 50));
    expect(await stale).toMatchObject({ name: "second" });
    name = "third";
    projects.invalidate("p1");
    const hung = release as () => void;
    release = null;
    hung();
    await new Promise((resolve) => setImmediate(resolve));
    expect(await projects.project("p1")).toMatchObject({ name: "third" });
  });

  it("keeps serving its records, in bounded memory, whatever made-up ids callers ask for (also while the database is down)", async () => {
    // Unauthenticated callers choose project ids and key ids: each unknown one is read, and its
    // miss held. They once shared the records' map, which was emptied when full, so a flood of
    // made-up ids dropped every record the instance was to serve through a database outage.
    let clock = 0;
    let down = false;
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    const secretBox = createSecretBox(randomBytes(32));
    const sealed = secretBox.seal(Buffer.from("share"), providerKeyAad("p1", "provider-a", "key000000001"));
    const cache = createCredentialDirectory({
      projects: {
        get: async (id: string) => {
          if (down) throw refused;
          return id === "p1" ? { id, name: "real" } : null;
        },
      } as unknown as ProjectRepository,
      keys: {
        getProviderKey: async (id: string) => {
          if (down) throw refused;
          return id === "key000000001" ? record(sealed) : null;
        },
      } as unknown as KeyRepository,
      secretBox,
      ttlMs: 1000,
      maxStaleMs: 10_000,
      maxEntries: 8,
      now: () => clock,
    });
    expect(await cache.project("p1")).toMatchObject({ name: "real" });
    expect((await cache.key("key000000001"))?.record.projectId).toBe("p1");
    for (let index = 0; index < 50; index++) {
      expect(await cache.project(`junk${index}`)).toBeNull();
      expect(await cache.key(`junkkey${index}`)).toBeNull();
    }
    // Many at once as well: reads not answered yet are held with the misses.
    const pending = Array.from({ length: 50 }, (_, index) => cache.project(`burst${index}`));
    expect(await Promise.all(pending)).toEqual(Array(50).fill(null));
    expect(cache.settledProject("p1")).toMatchObject({ name: "real" });
    expect(cache.entryCounts()).toMatchObject({
      projects: { known: 1, misses: 8 },
      keys: { known: 1, misses: 8 },
    });

    down = true;
    clock = 5000;
    expect(cache.holdsProjects()).toBe(true);
    expect(await cache.project("p1")).toMatchObject({ name: "real" });
    expect((await cache.key("key000000001"))?.serverShare().toString()).toBe("share");
    await expect(cache.project("junk-new")).rejects.toMatchObject({ code: "SERVICE_UNAVAILABLE" });
    expect(cache.readAt("p1", "key000000001")).toBe(0);
  });

  it("lets the least recently used record go when full, one at a time", async () => {
    let clock = 0;
    const reads: string[] = [];
    const cache = createCredentialDirectory({
      projects: {
        get: async (id: string) => {
          reads.push(id);
          return { id, name: id };
        },
      } as unknown as ProjectRepository,
      keys: {} as KeyRepository,
      secretBox: createSecretBox(randomBytes(32)),
      ttlMs: 1000,
      maxEntries: 3,
      now: () => clock,
    });
    for (const id of ["a", "b", "c"]) await cache.project(id);
    clock = 2000;
    await cache.project("a"); // read again: now the most recently used
    await cache.project("d"); // b goes, only b
    expect(cache.entryCounts().projects).toEqual({ known: 3, misses: 0 });
    reads.length = 0;
    clock = 2500;
    for (const id of ["a", "c", "d"]) await cache.project(id);
    expect(reads).toEqual(["c"]); // c was stale (read at 0); a and d are fresh
    await cache.project("b");
    expect(reads).toEqual(["c", "b"]);
  });

  it("drops a held miss on invalidation: a project or key just added is read", async () => {
    let exists = false;
    let projectReads = 0;
    let keyReads = 0;
    const cache = directory(
      async () => {
        keyReads++;
        return exists ? record("v1.x") : null;
      },
      async (id) => {
        projectReads++;
        return exists ? ({ id, name: "new" } as unknown as Project) : null;
      },
    );
    expect(await cache.project("p1")).toBeNull();
    expect(await cache.key("key000000001")).toBeNull();
    expect(await cache.project("p1")).toBeNull();
    expect([projectReads, keyReads]).toEqual([1, 1]);
    exists = true;
    cache.invalidate("p1");
    expect(cache.entryCounts()).toMatchObject({ projects: { misses: 0 }, keys: { misses: 0 } });
    expect(await cache.project("p1")).toMatchObject({ name: "new" });
    expect((await cache.key("key000000001"))?.record.projectId).toBe("p1");
    expect([projectReads, keyReads]).toEqual([2, 2]);
    expect(cache.entryCounts()).toMatchObject({ projects: { known: 1 }, keys: { known: 1 } });
  });
});
