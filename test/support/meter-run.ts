import type { ResponsesCall } from "../../src/providers/provider-adapter.js";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { createUsageMeter } from "../../src/proxy/usage-meter.js";

/**
 * Runs a body through a fresh usage meter, pushed in pieces cut at `splits`, and returns what it saw
 * (`responses`: a provider A Responses API call, whose response object's fields are read too;
 * `ended`: the answer ended cleanly, so the meter's `end` comes before `finish`, as in the proxy).
 */
export function meterRun(
  provider: ProviderId,
  body: string | Buffer,
  streaming: boolean,
  splits: number[] = [],
  responses?: ResponsesCall,
  ended = false,
) {
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  const usage = createUsageMeter(provider, {
    streaming,
    ...(responses ? { responses } : {}),
  });
  let at = 0;
  for (const split of [...splits, bytes.length]) {
    usage.push(bytes.subarray(at, split));
    at = split;
  }
  if (ended) usage.end();
  return usage.finish();
}
