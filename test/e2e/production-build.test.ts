import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:http";
import { type AddressInfo, createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import { loadedOnFirstUse } from "../support/first-use-packages.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import {
  type SpawnedGateway,
  adminToken as spawnedAdminToken,
  spawnGateway,
} from "../support/spawned-gateway.js";
import { appleKeyId, appleTeamId } from "../support/test-gateway.js";

const repository = join(import.meta.dirname, "../..");

/** The package a file in node_modules belongs to. */
function packageOf(file: string): string | undefined {
  return /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file)?.[1];
}

/**
 * The production build, `npm run build` (scripts/build.js): one bundle whose chunks a start loads
 * or not (docs/decisions/0017). Built here into the dist/ of a directory of its own, beside a link
 * to node_modules where it finds its external packages (better-sqlite3, Ajv) and a copy of
 * bin/sluice.js, which runs the build there (no src/ beside it).
 */
describe("the production build", () => {
  // A checkout as production holds it: the build in dist/, bin/sluice.js, node_modules (no src/,
  // so bin/sluice.js runs the build).
  const root = mkdtempSync(join(tmpdir(), "sluice-build-"));
  const build = join(root, "dist");
  const main = join(build, "src/main.js");
  /** Output file → the packages esbuild bundled into it (from its metafile). */
  let bundled: Map<string, Set<string | undefined>>;
  /** The child processes the build still had as it exited (test/support/children-at-exit.js). */
  let childrenAtExit: unknown;

  beforeAll(() => {
    symlinkSync(join(repository, "node_modules"), join(root, "node_modules"));
    mkdirSync(join(root, "bin"));
    copyFileSync(join(repository, "bin/sluice.js"), join(root, "bin/sluice.js"));
    const printed = execFileSync(
      process.execPath,
      ["--import", "./test/support/children-at-exit.js", "scripts/build.js", build],
      { cwd: repository, encoding: "utf8" },
    );
    childrenAtExit = JSON.parse(/children at exit: (.*)/.exec(printed)?.[1] ?? "null");
    const { outputs } = JSON.parse(readFileSync(join(build, "meta.json"), "utf8")) as {
      outputs: Record<string, { inputs: Record<string, unknown> }>;
    };
    bundled = new Map(
      Object.entries(outputs).map(([output, { inputs }]) => [
        resolve(repository, output),
        new Set(Object.keys(inputs).map(packageOf)),
      ]),
    );
  }, 60_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  /** A start of the build with `imports` preloaded: its output once it answered /health and stopped. */
  async function outputOfStart(options: {
    imports: string[];
    tsx?: boolean;
    env?: Record<string, string>;
  }): Promise<string> {
    const gateway = await spawnGateway({ ...options, entry: main });
    gateway.child.kill("SIGTERM");
    await gateway.exit;
    await gateway.remove();
    return gateway.output();
  }

  it.skipIf(process.platform !== "linux")(
    "leaves no child behind as it exits: esbuild's service is stopped and waited for, not left to init",
    () => {
      // A child the build has not waited for goes to init when it exits, and under `npm start` as a
      // container's command (npm as PID 1, which waits only for its own child) stays a zombie.
      expect(childrenAtExit).toEqual([]);
    },
  );

  it("writes its JavaScript in ASCII, so that V8 holds each chunk's source one byte a character", () => {
    // One character above U+00FF anywhere in a file, a ’ in a comment, has V8 hold the whole
    // source as two bytes a character for the life of the process: 4 MiB for the 2 MB chunk a
    // start loads (docs/decisions/0005, "RSS after load").
    const files = [...bundled.keys()].filter((file) => file.endsWith(".js"));
    expect(files).toContain(main);
    const notAscii = files.flatMap((file) => {
      const found = /[\u{80}-\u{10ffff}]/u.exec(readFileSync(file, "utf8"));
      return found ? [`${file.slice(build.length)}: ${found[0]}`] : [];
    });
    expect(notAscii).toEqual([]);
  });

  it("answers /health without loading a chunk that holds what only some calls need", {
    timeout: 30_000,
  }, async () => {
    const output = await outputOfStart({ imports: ["./test/support/loaded-packages.ts"] });
    const files = JSON.parse(/loaded files: (\[.*\])/.exec(output)?.[1] ?? "null") as string[];
    const packages = JSON.parse(/loaded packages: (\{.*\})/.exec(output)?.[1] ?? "null") as Record<
      string,
      string[]
    >;
    const chunks = files.filter((file) => file.startsWith(build));
    const loaded = new Set([
      ...(packages.required ?? []),
      ...(packages.imported ?? []),
      ...chunks.flatMap((chunk) => [...(bundled.get(chunk) ?? [])]),
    ]);
    // The chunks are seen, and what they hold: find-my-way is bundled into one that a start loads.
    expect(chunks).toContain(main);
    expect(loaded).toContain("find-my-way");
    // What only some calls need is in the build, in chunks of their own (Ajv is required at run time).
    const inBuild = new Set([...bundled.values()].flatMap((names) => [...names]));
    expect(loadedOnFirstUse.filter((name) => !inBuild.has(name))).toEqual(["ajv"]);
    expect(loadedOnFirstUse.filter((name) => loaded.has(name))).toEqual([]);
  });

  it("tells Redis the version of the ioredis it holds (CLIENT SETINFO LIB-VER), not that of the package.json two levels above its chunk", {
    timeout: 30_000,
  }, async () => {
    // ioredis 5 read its version from `<its file's directory>/../../package.json` at run time: from
    // the bundle's chunk, that is dist/package.json, which has none (ioredis 6 carries it in its
    // code). A server that records what the client sends on connecting (it answers nothing: the
    // commands are sent at once).
    let received = "";
    const redis = createNetServer((socket) => socket.on("data", (data) => (received += String(data))));
    await new Promise<void>((resolve) => redis.listen(0, "127.0.0.1", resolve));
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-build-redis-"));
    const child = spawn(process.execPath, [main], {
      env: {
        ...process.env,
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: "silent",
        SLUICE_DATA_DIR: dataDir,
        REDIS_URL: `redis://127.0.0.1:${(redis.address() as AddressInfo).port}`,
      },
      stdio: "ignore",
    });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    const libVer = /\$7\r\nLIB-VER\r\n\$\d+\r\n(.*?)\r\n/;
    try {
      for (const deadline = Date.now() + 20_000; !libVer.test(received) && Date.now() < deadline; )
        await new Promise((resolve) => setTimeout(resolve, 20));
      const { version } = JSON.parse(
        readFileSync(join(repository, "node_modules/ioredis/package.json"), "utf8"),
      ) as { version: string };
      expect(libVer.exec(received)?.[1]).toBe(version);
    } finally {
      child.kill("SIGKILL");
      await exited;
      redis.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("maps stack traces to the TypeScript sources under --enable-source-maps, and reads no map without", {
    timeout: 30_000,
  }, async () => {
    // Without tsx, which turns source maps on itself: what Node holds for the chunk with forward().
    const chunk = [...bundled.keys()].find(
      (output) =>
        output.endsWith(".js") && readFileSync(output, "utf8").includes("\n// src/proxy/forward.ts\n"),
    );
    expect(chunk).toBeDefined();
    const preload = `import { findSourceMap } from "node:module"; import { writeSync } from "node:fs";
      import { pathToFileURL } from "node:url";
      process.on("exit", () => writeSync(2, "\\nsources: " + JSON.stringify(
        findSourceMap(pathToFileURL(${JSON.stringify(chunk)}).href)?.payload.sources ?? null) + "\\n"));`;
    const sourcesOfStart = async (nodeOptions: string) => {
      const output = await outputOfStart({
        imports: [`data:text/javascript,${encodeURIComponent(preload)}`],
        tsx: false,
        env: { NODE_OPTIONS: nodeOptions },
      });
      const sources = JSON.parse(/sources: (.*)/.exec(output)?.[1] ?? "null") as string[] | null;
      // As the map names them, or as Node resolved them (file: URLs).
      return sources?.map((source) =>
        source.startsWith("file:") ? fileURLToPath(source) : resolve(dirname(chunk as string), source),
      );
    };
    expect(await sourcesOfStart("--enable-source-maps")).toContain(join(repository, "src/proxy/forward.ts"));
    // The default start pays for no map: reading them costs ~60 ms, and ~25 MiB once a stack is
    // formatted (decision 0017).
    expect(await sourcesOfStart("")).toBeUndefined();
  });

  /**
   * What the build loads on first use, each through a call that loads it, as `npm start` runs the
   * build (no tsx), against the fakes: the AI SDK and its providers (structured calls, images),
   * Ajv (`require`d at run time), zod with the admin input schemas, seed-projects, the DeviceCheck
   * JWT signing; the tests run the sources, where a package's module shape can differ from its
   * chunk's in the bundle.
   */
  describe("as built, on first use", () => {
    let fake: FakeUpstream;
    let apple: FakeApple;
    let gateway: SpawnedGateway;
    const appleKeys = generateAppleKeyPair();
    let files: string;
    const schema = {
      type: "object",
      properties: { title: { type: "string" }, score: { type: "integer", minimum: 0, maximum: 10 } },
      required: ["title", "score"],
      additionalProperties: false,
    };

    const redisSpace = redisTestSpace("build");

    beforeAll(async () => {
      fake = await startFakeUpstream();
      apple = await startFakeApple({ label: "production" });
      apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: appleKeys.publicKeyPem });
      files = mkdtempSync(join(tmpdir(), "sluice-build-files-"));
      const projectsFile = join(files, "projects.json");
      writeFileSync(
        projectsFile,
        JSON.stringify({
          projects: [{ id: "seeded-app", name: "Seeded", provider: "provider-b", testMode: true }],
        }),
      );
      gateway = await spawnGateway({
        entry: main,
        tsx: false,
        env: {
          ...providerBaseUrlEnv(fake),
          SLUICE_DEVICECHECK_PRODUCTION_URL: apple.url,
          SLUICE_CONFIG_FILE: projectsFile,
        },
      });
    }, 30_000);
    afterAll(async () => {
      await gateway?.remove();
      await redisSpace.cleanup();
      await apple?.close();
      await fake?.close();
      if (files) rmSync(files, { recursive: true, force: true });
    });

    it("seeds the projects of SLUICE_CONFIG_FILE", async () => {
      const seeded = await admin(gateway.url, "GET", "/projects/seeded-app");
      expect(seeded).toMatchObject({ status: 200, body: { id: "seeded-app", name: "Seeded" } });
    });

    it("takes admin input (zod), and refuses what its schemas refuse", async () => {
      expect(
        await admin(gateway.url, "POST", "/projects", { name: "x", provider: "provider-z" }),
      ).toMatchObject({
        status: 400,
        body: { error: { code: "BAD_REQUEST", message: expect.stringContaining("provider") } },
      });
      const created = await adminProject(gateway.url, {
        name: "admin",
        provider: "provider-a",
        testMode: true,
      });
      expect(await proxiedChat(gateway.url, created).then((response) => response.status)).toBe(200);
    });

    it.each(["provider-a", "provider-b", "provider-c"] as const)(
      "answers a structured call on %s (the AI SDK, Ajv), and a PROVIDER_ERROR once the repair fails too",
      async (provider) => {
        const project = await adminProject(gateway.url, {
          name: provider,
          provider,
          testMode: true,
          outputSchema: schema,
        });
        const text = (body: unknown) =>
          fetch(`${gateway.url}/v1/text/${project.projectId}`, {
            method: "POST",
            headers: { authorization: `Bearer ${project.bearer}`, "content-type": "application/json" },
            body: JSON.stringify(body),
          });
        fake.setStructuredOutput({ title: "A calm lake", score: 7 });
        const answered = await text({ text: "a lake" });
        expect(answered.status).toBe(200);
        expect(await answered.json()).toEqual({ title: "A calm lake", score: 7 });
        // Out of the schema's range (Ajv says so) both times: the repair is asked for, and fails too.
        fake.setStructuredOutput({ title: "A calm lake", score: 11 });
        fake.clear();
        const refused = await text({ text: "a lake" });
        expect({ status: refused.status, body: await refused.json() }).toMatchObject({
          status: 502,
          body: { error: { code: "PROVIDER_ERROR", message: expect.stringContaining("repair") } },
        });
        expect(fake.requests).toHaveLength(2);
      },
    );

    it.each(["provider-a", "provider-c"] as const)(
      "generates an image on %s into the local vault, and serves it back at its signed URL",
      async (provider) => {
        const project = await adminProject(gateway.url, {
          name: `images-${provider}`,
          provider,
          testMode: true,
          teamId: "team42",
          saveImagesToVault: true,
        });
        const images = await generatedImages(gateway.url, project);
        expect(images[0]?.path).toMatch(/^team42\//);
        const served = await fetch(images[0]?.url ?? "");
        expect(served.status).toBe(200);
        expect(Buffer.from(await served.arrayBuffer())).toEqual(tinyPng);
      },
    );

    /** A DeviceCheck project on `url`, and a proxied call of it with a device token Apple takes. */
    async function deviceCheckCalls(url: string, calls: number) {
      const project = await adminProject(url, {
        name: "devicecheck",
        provider: "provider-a",
        testMode: false,
        deviceCheck: {
          enabled: true,
          teamId: appleTeamId,
          keyId: appleKeyId,
          privateKey: appleKeys.privateKeyPem,
          environment: "production",
          tokenMode: "cached",
        },
      });
      const deviceToken = Buffer.from(`device-${randomBytes(12).toString("hex")}`).toString("base64");
      apple.registerValidToken(deviceToken);
      const applesBefore = apple.calls.length;
      const statuses: number[] = [];
      for (let call = 0; call < calls; call++) {
        const response = await proxiedChat(url, {
          projectId: project.projectId,
          bearer: `${project.partialKey}.${deviceToken}`,
        });
        await response.arrayBuffer();
        statuses.push(response.status);
      }
      return { statuses, appleCalls: apple.calls.slice(applesBefore) };
    }

    it("passes a DeviceCheck device token through the fake Apple (the ES256 JWT signed with the .p8 key)", async () => {
      const { statuses, appleCalls } = await deviceCheckCalls(gateway.url, 2);
      expect(statuses).toEqual([200, 200]);
      // Asked once: the token is cached (in memory here).
      expect(appleCalls).toEqual([
        expect.objectContaining({ status: 200, jwtClaims: expect.objectContaining({ iss: appleTeamId }) }),
      ]);
    });

    it.skipIf(!redisAvailable)(
      "starts on Redis (ioredis, imported on first use from a chunk of its own, is whole there), and keeps device tokens and rate limits there",
      { timeout: 30_000 },
      async () => {
        // A package of CommonJS imported with import() comes out of its chunk as a default export
        // alone: a named export read from it is undefined there.
        const prefix = redisSpace.nextPrefix();
        const onRedis = await spawnGateway({
          entry: main,
          tsx: false,
          env: {
            ...providerBaseUrlEnv(fake),
            SLUICE_DEVICECHECK_PRODUCTION_URL: apple.url,
            REDIS_URL: redisUrl,
            SLUICE_REDIS_KEY_PREFIX: `${prefix}:`,
          },
        });
        try {
          const health = (await (await fetch(`${onRedis.url}/health`)).json()) as {
            checks: { redis?: { status: string } };
          };
          expect(health.checks.redis?.status).toBe("ok");
          const { statuses, appleCalls } = await deviceCheckCalls(onRedis.url, 2);
          expect(statuses).toEqual([200, 200]);
          expect(appleCalls).toHaveLength(1);
          // The token and the rate limits' counts are Redis's (its scripts ran).
          const redis = await redisSpace.readyClient();
          const keys = await redis.keys(`${prefix}:*`);
          expect(keys.length).toBeGreaterThan(0);
        } finally {
          await onRedis.remove();
        }
      },
    );

    it("generates an image into the S3 vault, and serves it back at its presigned URL", {
      timeout: 30_000,
    }, async () => {
      // No fake S3 in test/fakes: a bucket kept in memory, PUT and GET by path, no more.
      const objects = new Map<string, Buffer>();
      const s3 = createServer(async (request, response) => {
        const path = new URL(request.url ?? "/", "http://s3").pathname;
        const chunks: Buffer[] = [];
        for await (const chunk of request) chunks.push(chunk as Buffer);
        if (request.method === "PUT") objects.set(path, Buffer.concat(chunks));
        const stored = request.method === "GET" ? objects.get(path) : Buffer.alloc(0);
        response.writeHead(stored ? 200 : 404).end(stored);
      });
      await new Promise<void>((resolve) => s3.listen(0, "127.0.0.1", resolve));
      const onS3 = await spawnGateway({
        entry: main,
        tsx: false,
        env: {
          ...providerBaseUrlEnv(fake),
          SLUICE_VAULT_S3_ENDPOINT: `http://127.0.0.1:${(s3.address() as AddressInfo).port}`,
          SLUICE_VAULT_S3_BUCKET: "vault",
          SLUICE_VAULT_S3_ACCESS_KEY_ID: "id",
          SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret",
        },
      });
      try {
        const project = await adminProject(onS3.url, {
          name: "s3",
          provider: "provider-c",
          testMode: true,
          teamId: "team42",
          saveImagesToVault: true,
        });
        const images = await generatedImages(onS3.url, project);
        expect(images[0]?.url).toContain("X-Amz-Signature=");
        expect([...objects.keys()]).toEqual([`/vault/${images[0]?.path}`]);
        expect(Buffer.from(await (await fetch(images[0]?.url ?? "")).arrayBuffer())).toEqual(tinyPng);
      } finally {
        await onS3.remove();
        s3.closeAllConnections();
        await new Promise((resolve) => s3.close(resolve));
      }
    });
  });

  describe("as built, on PostgreSQL (pg, imported on first use)", () => {
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    let gateway: SpawnedGateway;
    const masterKey = randomBytes(32).toString("base64");

    beforeAll(async () => {
      if (!postgresAvailable) return;
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      gateway = await spawnGateway({
        entry: main,
        tsx: false,
        env: {
          ...providerBaseUrlEnv(fake),
          DATABASE_URL: schema.url,
          SLUICE_MASTER_KEY: masterKey,
          SLUICE_USAGE_FLUSH_INTERVAL_MS: "50",
        },
      });
    }, 30_000);
    afterAll(async () => {
      await gateway?.remove();
      await fake?.close();
      await schema?.drop();
    });

    it.skipIf(!postgresAvailable)(
      "proxies a call and writes its usage row, which the built CLI reports",
      async () => {
        const project = await adminProject(gateway.url, {
          name: "pg",
          provider: "provider-a",
          testMode: true,
        });
        const response = await proxiedChat(gateway.url, project);
        expect(response.status).toBe(200);
        await response.arrayBuffer();
        const requestId = response.headers.get("x-request-id");
        const client = new pg.Client({ connectionString: schema.url });
        await client.connect();
        try {
          let rows: unknown[] = [];
          for (const deadline = Date.now() + 5000; rows.length === 0 && Date.now() < deadline; ) {
            rows = (
              await client.query("select project_id, status from usage_records where request_id = $1", [
                requestId,
              ])
            ).rows;
            if (rows.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
          }
          expect(rows).toEqual([{ project_id: project.projectId, status: 200 }]);
        } finally {
          await client.end();
        }
        // The CLI's entry imports pg on first use too.
        const report = execFileSync(
          process.execPath,
          [join(root, "bin/sluice.js"), "usage", project.projectId],
          {
            env: { ...process.env, DATABASE_URL: schema.url, SLUICE_MASTER_KEY: masterKey },
            encoding: "utf8",
          },
        );
        expect(JSON.parse(report)).toMatchObject({ rows: [{ requests: 1 }] });
      },
    );
  });

  describe("the CLI as built (bin/sluice.js runs dist/ where there is no src/)", () => {
    let dataDir: string;
    beforeAll(() => {
      dataDir = mkdtempSync(join(tmpdir(), "sluice-build-cli-"));
    });
    afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

    it("creates a project with an output schema and a DeviceCheck key, and lists it", {
      timeout: 30_000,
    }, async () => {
      const keyFile = join(dataDir, "AuthKey.p8");
      writeFileSync(keyFile, generateAppleKeyPair().privateKeyPem);
      const env = {
        ...process.env,
        SLUICE_DATA_DIR: dataDir,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
      };
      const sluice = (...argv: string[]) =>
        execFileSync(process.execPath, [join(root, "bin/sluice.js"), ...argv], { env, encoding: "utf8" });
      const created = JSON.parse(
        sluice(
          "projects",
          "create",
          "--name",
          "cli",
          "--provider",
          "provider-a",
          "--output-schema",
          '{"type":"object","properties":{"a":{"type":"string","pattern":"^a+$"}}}',
          "--device-check",
          "true",
          "--device-check-team-id",
          appleTeamId,
          "--device-check-key-id",
          appleKeyId,
          "--device-check-private-key-file",
          keyFile,
        ),
      ) as { project: { id: string } };
      expect(created.project).toMatchObject({
        outputSchema: { properties: { a: { pattern: "^a+$" } } },
        deviceCheck: { enabled: true, keyId: appleKeyId },
      });
      const listed = JSON.parse(sluice("projects", "list")) as Array<{ id: string }>;
      expect(listed.map(({ id }) => id)).toEqual([created.project.id]);
    });

    it("serves (the server, imported on first use)", { timeout: 30_000 }, async () => {
      const gateway = await spawnGateway({ entry: join(root, "bin/sluice.js"), args: ["serve"], tsx: false });
      try {
        expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      } finally {
        await gateway.remove();
      }
    });
  });
});

/** The environment naming the fake's three provider base URLs. */
function providerBaseUrlEnv(fake: FakeUpstream): Record<string, string> {
  const urls = providerBaseUrls(fake);
  return {
    SLUICE_PROVIDER_A_BASE_URL: urls.providerABaseUrl,
    SLUICE_PROVIDER_B_BASE_URL: urls.providerBBaseUrl,
    SLUICE_PROVIDER_C_BASE_URL: urls.providerCBaseUrl,
  };
}

/** An admin API call to the spawned gateway at `url`: its status and JSON body. */
async function admin(url: string, method: string, path: string, body?: unknown) {
  const response = await fetch(`${url}/admin/v1${path}`, {
    method,
    headers: {
      authorization: `Bearer ${spawnedAdminToken}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/**
 * A project made over the admin API with `fields`, and a key of its provider: its id, the key's
 * partial key, and the Bearer value of a Test Mode call.
 */
async function adminProject(url: string, fields: Record<string, unknown> & { provider: string }) {
  const created = await admin(url, "POST", "/projects", fields);
  expect(created.status).toBe(201);
  const { project, testKey } = created.body as { project: { id: string }; testKey?: string };
  const key = await admin(url, "POST", `/projects/${project.id}/keys`, {
    provider: fields.provider,
    apiKey: `sk-build-${randomBytes(6).toString("hex")}`,
  });
  const { partialKey } = key.body as { partialKey: string };
  return { projectId: project.id, partialKey, bearer: `${partialKey}.${testKey}` };
}

/** The images of a `/v1/image` call of `project` on the gateway at `url` (a 200). */
async function generatedImages(url: string, project: { projectId: string; bearer: string }) {
  const response = await fetch(`${url}/v1/image/${project.projectId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${project.bearer}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "a lighthouse" }),
  });
  const body = (await response.json()) as { images: Array<{ url: string; path: string }> };
  expect({ status: response.status, body }).toMatchObject({ status: 200 });
  return body.images;
}
