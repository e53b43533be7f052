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
}

/** One bounded autocannon run against `url`. */
export async function runLoad(
  url: string,
  load: LoadCase,
  connections: number,
  seconds: number,
): Promise<LoadResult> {
  const result = await autocannon({
    url: `${url}${load.path}`,
    method: "POST",
    headers: { "content-type": "application/json", ...load.headers },
    body: load.body,
    connections,
    duration: seconds,
  });
  return {
    requests: result.requests.total,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
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
 * Median milliseconds over `count` sequential requests (one connection, keep-alive), from sending
 * to the first body byte (`until: "first-byte"`, a stream's first event) or to the end of the body.
 * The rest of a stream is read too, so the connection stays open for the next request: cutting it
 * would time a new TCP connection (to the target, and from a proxy to the provider) with every
 * sample instead of the first event.
 */
export async function sequentialMedian(
  url: string,
  load: LoadCase,
  count: number,
  until: "first-byte" | "end",
): Promise<number> {
  const samples: number[] = [];
  for (let index = 0; index < count; index++) {
    const started = performance.now();
    const response = await request(`${url}${load.path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...load.headers },
      body: load.body,
    });
    if (until === "end") {
      await response.body.dump();
      samples.push(performance.now() - started);
      continue;
    }
    let first = true;
    for await (const _chunk of response.body) {
      if (first) samples.push(performance.now() - started);
      first = false;
    }
  }
  return median(samples);
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}
