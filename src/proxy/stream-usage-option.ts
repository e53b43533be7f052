import type { ProviderId } from "../providers/provider-id.js";

/**
 * Provider A reports usage on a streamed chat completion (and a streamed legacy completion) only
 * when asked (`stream_options.include_usage`). To record usage for every call, a streamed
 * completion that does not ask gets the option added; the client then also receives the final
 * usage chunk (`choices: []`), which the official SDKs accept. Every other body is forwarded byte
 * for byte.
 */
// Encoded once: Buffer#indexOf would encode a string argument on every call.
const streamField = Buffer.from('"stream"');
const usageAsked = Buffer.from('"include_usage":true');
const usageMember = Buffer.from(',"stream_options":{"include_usage":true}');

export function withStreamUsage(provider: ProviderId, path: string, body: Buffer): Buffer {
  if (provider !== "provider-a" || body.length === 0) return body;
  if (path !== "chat/completions" && path !== "completions") return body;
  if (body.indexOf(streamField) < 0 || body.indexOf(usageAsked) >= 0) return body;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    return body;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return body;
  const request = parsed as { stream?: unknown; stream_options?: unknown };
  if (request.stream !== true) return body;
  // The usual case: no stream_options at all. The member is added before the closing brace and
  // every other byte stays as sent: re-serialising would round integers beyond 2^53 (a `seed`,
  // say) and rewrite numbers and escapes.
  if (request.stream_options === undefined) {
    const close = body.lastIndexOf(0x7d /* } */);
    return Buffer.concat([body.subarray(0, close), usageMember, body.subarray(close)]);
  }
  const options =
    typeof request.stream_options === "object" && request.stream_options !== null
      ? request.stream_options
      : {};
  if ((options as { include_usage?: unknown }).include_usage === true) return body;
  request.stream_options = { ...options, include_usage: true };
  return Buffer.from(JSON.stringify(request));
}
