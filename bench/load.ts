import autocannon from "autocannon";
import { request } from "undici";

export interface LoadCase {
  name: "json" | "sse";
  path: string;
  headers: Record<string, string>;
  body: string;
}

export interface LoadResult {
  requests: number;
  errors: number;
  non2xx: number;
  rps: number;
  p50: number;
  p99: number;
  /** Answers by status code. */
  statuses: Record<string, number>;
}

/** One bounded autocannon run against `url`: for a number of seconds, or a number of requests. */
export async function runLoad(
  url: string,
  load: LoadCase,
  connections: number,
  limit: { seconds: number } | { requests: number },
  timeoutSeconds = 10,
): Promise<LoadResult> {
  const result = await autocannon({
    url: `${url}${load.path}`,
    method: "POST",
    headers: { "content-type": "application/json", ...load.headers },
    body: load.body,
    connections,
    timeout: timeoutSeconds,
    ...("seconds" in limit ? { duration: limit.seconds } : { amount: limit.requests }),
  });
  return {
    requests: result.requests.total,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    statuses: Object.fromEntries(
      Object.entries(result.statusCodeStats ?? {}).map(([code, stats]) => [code, stats.count ?? 0]),
    ),
  };
}

/** Reads one whole response and counts its SSE `data:` events (checks nothing was lost or merged). */
export async function countSseEvents(url: string, load: LoadCase): Promise<number> {
  const response = await request(`${url}${load.path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...load.headers },
    body: load.body,
  });
  const text = await response.body.text();
  return text.split("\n").filter((line) => line.startsWith("data:")).length;
}

/**
 * Median milliseconds per target over `count` sequential requests each (one keep-alive connection
 * per target), from sending to the first body byte (`until: "first-byte"`, a stream's first event)
 * or to the end of the body. The targets take turns request by request, so every target is timed
 * under the same machine state: timed one block after another, the direct baseline and a proxy
 * were seconds apart on this shared VM, and the drift between blocks was as large as the
 * difference being measured. The rest of a stream is read too, so the connection stays open for
 * the next request: cutting it would time a new TCP connection (to the target, and from a proxy to
 * the provider) with every sample instead of the first event.
 */
export async function sequentialMedians(
  targets: readonly { name: string; url: string; load: LoadCase }[],
  count: number,
  until: "first-byte" | "end",
): Promise<Record<string, number>> {
  const samples = new Map<string, number[]>(targets.map((target) => [target.name, []]));
  for (let index = 0; index < count; index++) {
    // The order rotates too, so no target always follows the same one.
    for (let turn = 0; turn < targets.length; turn++) {
      const target = targets[(index + turn) % targets.length] as (typeof targets)[number];
      samples.get(target.name)?.push(await timeOne(target.url, target.load, until));
    }
  }
  return Object.fromEntries([...samples].map(([name, values]) => [name, median(values)]));
}

async function timeOne(url: string, load: LoadCase, until: "first-byte" | "end"): Promise<number> {
  const started = performance.now();
  const response = await request(`${url}${load.path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...load.headers },
    body: load.body,
  });
  if (until === "end") {
    await response.body.dump();
    return performance.now() - started;
  }
  let firstByteMs = Number.NaN;
  for await (const _chunk of response.body) {
    if (Number.isNaN(firstByteMs)) firstByteMs = performance.now() - started;
  }
  return firstByteMs;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}
