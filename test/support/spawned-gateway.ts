import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, fetch as undiciFetch } from "undici";
import { usageRequestIdsIn, usageRowIn } from "./usage-request-ids.js";

/** How long a spawned gateway has to answer /health. */
const readyWithinMs = 45_000;
export const adminToken = `admin-${randomBytes(12).toString("hex")}`;

export interface SpawnedGateway {
  url: string;
  child: ChildProcess;
  /** How the process ended: its exit code, or the signal that killed it. */
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** What it wrote to stderr, and to stdout when stdout is a pipe. */
  output(): string;
  /** A Test Mode project with a provider A key: its id and the Bearer value of its calls. */
  createProject(): Promise<{ projectId: string; bearer: string }>;
  /** The request ids of the usage rows in its SQLite database. */
  usageRequestIds(): string[];
  /** The status and outcome of the usage row `requestId` in its SQLite database, if any. */
  usageRow(requestId: string | null): { status: number; outcome: string } | undefined;
  /** Kills the process if it still runs and removes its data dir. */
  remove(): Promise<void>;
}

/**
 * Runs `node --import tsx src/main.ts` as `npm start` does, on SQLite in a fresh data dir, on a port
 * picked here (its stdout may go somewhere the test cannot read), and waits until /health answers.
 * `imports` are modules preloaded after tsx (test hooks inside the process); `entry` runs another
 * entry than src/main.ts (a build's), with `args` after it (`serve` for bin/sluice.js), and
 * `tsx: false` runs it without tsx (its preloads then JavaScript). `nodeFlags` go to Node first.
 * `tls` serves HTTPS (SLUICE_TLS_CERT and SLUICE_TLS_KEY, a certificate for localhost signed by
 * `ca`): `url` is then https, and the harness's own requests trust `ca`.
 */
export async function spawnGateway(
  options: {
    env?: Record<string, string>;
    stdout?: "pipe" | number;
    imports?: string[];
    entry?: string;
    args?: string[];
    tsx?: boolean;
    nodeFlags?: string[];
    tls?: { certFile: string; keyFile: string; ca: Buffer };
  } = {},
): Promise<SpawnedGateway> {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-spawned-"));
  const port = await freePort();
  const url = `${options.tls ? "https" : "http"}://127.0.0.1:${port}`;
  const send = harnessFetch(options.tls?.ca);
  const child = spawn(
    process.execPath,
    [
      ...(options.nodeFlags ?? []),
      ...(options.tsx === false ? [] : ["--import", "tsx"]),
      ...(options.imports ?? []).flatMap((module) => ["--import", module]),
      options.entry ?? "src/main.ts",
      ...(options.args ?? []),
    ],
    {
      cwd: join(import.meta.dirname, "../.."),
      env: {
        ...process.env,
        PORT: String(port),
        HOST: "127.0.0.1",
        LOG_LEVEL: "info",
        SLUICE_DATA_DIR: dataDir,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_ADMIN_TOKEN: adminToken,
        ...(options.tls
          ? { SLUICE_TLS_CERT: options.tls.certFile, SLUICE_TLS_KEY: options.tls.keyFile }
          : {}),
        ...options.env,
      },
      stdio: ["ignore", options.stdout ?? "pipe", "pipe"],
    },
  );
  let output = "";
  const collect = (chunk: Buffer) => {
    output += String(chunk);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  let exited = false;
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      exited = true;
      resolve({ code, signal });
    }),
  );
  const gateway: SpawnedGateway = {
    url,
    child,
    exit,
    output: () => output,
    createProject: () => createProjectOverAdminApi(url, adminToken, "spawned", send),
    usageRequestIds: () => usageRequestIdsIn(dataDir),
    usageRow: (requestId) => usageRowIn(dataDir, requestId),
    async remove() {
      if (!exited) {
        child.kill("SIGKILL");
        await exit;
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  // Generous: tsx compiles the gateway at each start, and three started at once on a machine whose
  // two cores other test files keep busy took more than 20 s (a full run, the instances' log
  // showing them started). A gateway that hangs still fails here, and one that exits at once.
  const readyBy = Date.now() + readyWithinMs;
  while (!(await answers(`${url}/health`, send))) {
    if (exited || Date.now() > readyBy) {
      const why = exited ? `it exited: ${JSON.stringify(await exit)}` : `in ${readyWithinMs / 1000} s`;
      await gateway.remove();
      throw new Error(`the gateway did not answer /health (${why}):\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return gateway;
}

/**
 * Whether `url` answers. The harness's own requests (this probe, the admin calls) close their
 * connections: one left idle would be open at the gateway when a test counts its connections.
 */
async function answers(url: string, send: typeof fetch): Promise<boolean> {
  try {
    const response = await send(url, {
      headers: { connection: "close" },
      signal: AbortSignal.timeout(1000),
    });
    await response.arrayBuffer();
    return true;
  } catch {
    return false;
  }
}

/**
 * The harness's fetch: the global one, or over TLS one that trusts `ca` and checks the certificate
 * names localhost (the gateway listens on 127.0.0.1).
 */
function harnessFetch(ca: Buffer | undefined): typeof fetch {
  if (!ca) return fetch;
  const dispatcher = new Agent({ connect: { ca, servername: "localhost" } });
  return ((url: string, init: RequestInit = {}) =>
    undiciFetch(url, { ...(init as object), dispatcher })) as unknown as typeof fetch;
}

/** A port on 127.0.0.1 free when asked (the system's pick), for a process started next to listen on. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A Test Mode project with a provider A key, made through the admin API of the gateway at `url`:
 * its id and the Bearer value of its calls.
 */
export async function createProjectOverAdminApi(
  url: string,
  token: string,
  name: string,
  send: typeof fetch = fetch,
): Promise<{ projectId: string; bearer: string }> {
  // `connection: close`, as the probe in `spawnGateway`: nothing of the harness is left open.
  const admin = (path: string, body: unknown) =>
    send(`${url}/admin/v1${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", connection: "close" },
      body: JSON.stringify(body),
    }).then((response) => response.json() as Promise<Record<string, unknown>>);
  const created = (await admin("/projects", { name, provider: "provider-a", testMode: true })) as {
    project: { id: string };
    testKey: string;
  };
  const key = (await admin(`/projects/${created.project.id}/keys`, {
    provider: "provider-a",
    apiKey: `sk-${name}-0123456789`,
  })) as { partialKey: string };
  return { projectId: created.project.id, bearer: `${key.partialKey}.${created.testKey}` };
}

/**
 * Runs `node --import tsx src/main.ts` (npm start) on `env` (SLUICE_DATA_DIR among it) until it
 * exits, for a start that is to fail: its exit code and what it wrote to stderr (killed after 15 s).
 * `withoutFileOverride`: when the tests run as root, the process runs without the capabilities
 * that let root write and search any directory (`setpriv`), so file permissions apply to it as to
 * any user, while it can still read the checkout (another user might not: a clone in a directory
 * only root may enter, as `mktemp -d` makes).
 */
export async function runGatewayUntilExit(
  env: Record<string, string>,
  options: { withoutFileOverride?: boolean } = {},
): Promise<{ code: number | null; stderr: string }> {
  const gateway = [process.execPath, "--import", "tsx", "src/main.ts"];
  const dropped = "-dac_override,-dac_read_search";
  const command =
    options.withoutFileOverride && process.getuid?.() === 0
      ? ["setpriv", `--inh-caps=${dropped}`, `--bounding-set=${dropped}`, "--", ...gateway]
      : gateway;
  const child = spawn(command[0] as string, command.slice(1), {
    cwd: join(import.meta.dirname, "../.."),
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "silent", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += String(chunk);
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  clearTimeout(killer);
  return { code, stderr };
}
