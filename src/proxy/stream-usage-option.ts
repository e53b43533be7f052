import { jsonStart, lastMembers, type Span, skipSpaces } from "../providers/json-bytes.js";
import type { ProviderId } from "../providers/provider-id.js";
import { decodeRequestBody } from "./request-body-coding.js";

/**
 * Provider A reports usage on a streamed chat completion (and a streamed legacy completion) only
 * when asked (`stream_options.include_usage`). To record usage for every call, a streamed
 * completion that does not ask gets the option set. The final usage chunk (`choices: []`) this
 * adds to the stream is metered but not forwarded to the client (InjectedUsageFilter). Every other
 * body is forwarded byte for byte (the same Buffer is returned: a different one means the option
 * was set), and a changed one keeps every byte but the option's: re-serialising would round
 * integers beyond 2^53 (a `seed`, say) and rewrite numbers and escapes.
 *
 * The decision is the body's as the provider reads it: a byte search alone would miss a key written
 * with escapes (`"\u0073tream"`) and take an `include_usage` anywhere (in a tool's schema, say) for
 * the option, and a client could stream without its usage being recorded. So the body's top-level
 * members are walked as JSON (a key with an escape is decoded; the last member of a name counts, as
 * in `JSON.parse`), without parsing the whole body: on the proxy's hot path that parse cost more
 * than the rest of the body handling. Only bodies that hold neither `"stream"` nor any `\u` escape
 * are passed without a walk: no key of theirs can be `stream`. A body whose top level is not a JSON
 * object's is forwarded as sent, for the provider to refuse.
 */
// Encoded once: Buffer#indexOf would encode a string argument on every call.
const streamField = Buffer.from('"stream"');
const unicodeEscape = Buffer.from("\\u");
const usageMember = Buffer.from('"stream_options":{"include_usage":true}');
const usageOption = Buffer.from('"include_usage":true');
const usageObject = Buffer.from('{"include_usage":true}');
const trueValue = Buffer.from("true");
const comma = Buffer.from(",");

export function withStreamUsage(provider: ProviderId, path: string, body: Buffer): Buffer {
  if (!mayStream(provider, path) || body.length === 0) return body;
  if (body.indexOf(streamField) < 0 && body.indexOf(unicodeEscape) < 0) return body;
  try {
    return withOption(body);
  } catch {
    return body;
  }
}

/** The paths whose streams report usage only when asked. */
function mayStream(provider: ProviderId, path: string): boolean {
  return provider === "provider-a" && (path === "chat/completions" || path === "completions");
}

/**
 * `withStreamUsage` for a body sent with a `content-encoding`: compressed bytes hold no `"stream"`
 * to find, and a client could stream unmetered by compressing its body. On the paths the option
 * applies to, the body is decoded to decide; it is forwarded as sent when it needs no change, and
 * else decoded with the option set (`decoded`: to be sent without its content-encoding). A coding
 * that cannot be undone is refused there (415), as the option could not be checked. `plain` is the
 * body as its JSON reads when it was decoded here (null elsewhere), so it need not be decoded again.
 */
export async function withStreamUsageDecoded(
  provider: ProviderId,
  path: string,
  body: Buffer,
  contentEncoding: string,
  maxBytes: number,
): Promise<{ body: Buffer; decoded: boolean; plain: Buffer | null }> {
  if (!mayStream(provider, path) || body.length === 0) return { body, decoded: false, plain: null };
  const plain = await decodeRequestBody(body, contentEncoding, maxBytes);
  const asked = withStreamUsage(provider, path, plain);
  return asked === plain ? { body, decoded: false, plain } : { body: asked, decoded: true, plain: asked };
}

/** The body asking for usage when it streams; throws on a body that is not JSON. */
function withOption(body: Buffer): Buffer {
  const open = jsonStart(body);
  if (body[open] !== 0x7b /* { */) return body;
  // Where the provider reads them: the last member of each name.
  const [stream, member] = lastMembers(body, open, "stream", "stream_options");
  if (!stream || !isTrue(body, stream)) return body;
  if (member === null) {
    // No stream_options: the member goes before the closing brace (the body has `stream`).
    const close = body.lastIndexOf(0x7d /* } */);
    return Buffer.concat([body.subarray(0, close), comma, usageMember, body.subarray(close)]);
  }
  if (body[member.start] !== 0x7b /* { */) return splice(body, member.start, member.end, usageObject);
  const [include] = lastMembers(body, member.start, "include_usage");
  if (include) return isTrue(body, include) ? body : splice(body, include.start, include.end, trueValue);
  // An object without the option: it goes first, before the members there are.
  const first = skipSpaces(body, member.start + 1);
  const insert = body[first] === 0x7d ? usageOption : Buffer.concat([usageOption, comma]);
  return splice(body, member.start + 1, member.start + 1, insert);
}

function isTrue(body: Buffer, value: Span): boolean {
  return value.end - value.start === 4 && body.compare(trueValue, 0, 4, value.start, value.end) === 0;
}

function splice(body: Buffer, start: number, end: number, insert: Buffer): Buffer {
  return Buffer.concat([body.subarray(0, start), insert, body.subarray(end)]);
}
