import { boundedWait, retryAfterSeconds } from "../net/retry-after.js";

/**
 * How long a provider's failed answer asks the caller to wait before trying again, in whole
 * seconds (1 to 3600), or null when it names no wait. Read as the AI SDK's own retries read it:
 * `retry-after-ms` (provider A), then `retry-after` (seconds or an HTTP-date; A and B); and, as
 * provider C sends neither, the `google.rpc.RetryInfo` entry of its error's `details`
 * (`"retryDelay": "17.5s"`, protobuf's JSON form of a Duration).
 */
export function providerRetryAfter(
  headers: Record<string, string> | undefined,
  body: string | undefined,
  now: number = Date.now(),
): number | null {
  const milliseconds = headers?.["retry-after-ms"]?.trim();
  if (milliseconds !== undefined && /^\d+(\.\d+)?$/.test(milliseconds))
    return boundedWait(Math.ceil(Number(milliseconds) / 1000));
  return retryAfterSeconds(headers?.["retry-after"], now) ?? retryInfoSeconds(body);
}

/** The `retryDelay` of a Google API error's RetryInfo, in whole seconds; null without one. */
function retryInfoSeconds(body: string | undefined): number | null {
  // Only a body that can be such an error is parsed (an error body is small; this one has "retryDelay").
  if (body === undefined || !body.includes("retryDelay")) return null;
  let details: unknown;
  try {
    details = (JSON.parse(body) as { error?: { details?: unknown } } | null)?.error?.details;
  } catch {
    return null;
  }
  if (!Array.isArray(details)) return null;
  for (const detail of details as Array<Record<string, unknown> | null>) {
    const delay = detail?.retryDelay;
    if (String(detail?.["@type"]).endsWith("/google.rpc.RetryInfo") && typeof delay === "string") {
      const seconds = /^(\d+(?:\.\d+)?)s$/.exec(delay.trim());
      if (seconds) return boundedWait(Math.ceil(Number(seconds[1])));
    }
  }
  return null;
}
