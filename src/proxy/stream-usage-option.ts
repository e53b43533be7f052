import type { ProviderId } from "../providers/provider-id.js";
import { skipSpaces, valueEnd } from "./json-bytes.js";

/**
 * Provider A reports usage on a streamed chat completion (and a streamed legacy completion) only
 * when asked (`stream_options.include_usage`). To record usage for every call, a streamed
 * completion that does not ask gets the option set; the client then also receives the final
 * usage chunk (`choices: []`), which the official SDKs accept. Every other body is forwarded byte
 * for byte, and a changed one keeps every byte but the option's: re-serialising would round
 * integers beyond 2^53 (a `seed`, say) and rewrite numbers and escapes.
 *
 * The decision is the parsed body's, as the provider reads it: a byte search alone would miss a key
 * written with escapes (`"\u0073tream"`) and take an `include_usage` anywhere (in a tool's schema,
 * say) for the option, and a client could stream without its usage being recorded. Only bodies
 * that hold neither `"stream"` nor any `\u` escape are passed without a parse: no key of theirs
 * can be `stream`.
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
  if (provider !== "provider-a" || body.length === 0) return body;
  if (path !== "chat/completions" && path !== "completions") return body;
  if (body.indexOf(streamField) < 0 && body.indexOf(unicodeEscape) < 0) return body;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    return body;
  }
  if (!isObject(parsed) || parsed.stream !== true) return body;
  const options = parsed.stream_options;
  if (isObject(options) && options.include_usage === true) return body;

  // Where the provider reads them: the last member of each name (JSON.parse keeps the last too).
  const open = skipSpaces(body, 0);
  const member = lastMember(body, open, "stream_options");
  if (member === null) {
    // No stream_options: the member goes before the closing brace (the body has `stream`).
    const close = body.lastIndexOf(0x7d /* } */);
    return Buffer.concat([body.subarray(0, close), comma, usageMember, body.subarray(close)]);
  }
  if (!isObject(options)) return splice(body, member.start, member.end, usageObject);
  const include = lastMember(body, member.start, "include_usage");
  if (include !== null) return splice(body, include.start, include.end, trueValue);
  // An object without the option: it goes first, before the members there are.
  const first = skipSpaces(body, member.start + 1);
  const insert = body[first] === 0x7d ? usageOption : Buffer.concat([usageOption, comma]);
  return splice(body, member.start + 1, member.start + 1, insert);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function splice(body: Buffer, start: number, end: number, insert: Buffer): Buffer {
  return Buffer.concat([body.subarray(0, start), insert, body.subarray(end)]);
}

/**
 * The value of the last member named `name` of the object that opens at `open`, as byte offsets
 * (`end` exclusive); null when it has none. The body is valid JSON (it parsed), so this only walks.
 */
function lastMember(body: Buffer, open: number, name: string): { start: number; end: number } | null {
  let found: { start: number; end: number } | null = null;
  let at = skipSpaces(body, open + 1);
  if (body[at] === 0x7d /* } */) return null;
  for (;;) {
    const keyEnd = valueEnd(body, at);
    const key = JSON.parse(body.toString("utf8", at, keyEnd)) as string;
    const start = skipSpaces(body, skipSpaces(body, keyEnd) + 1); // past the colon
    const end = valueEnd(body, start);
    if (key === name) found = { start, end };
    at = skipSpaces(body, end);
    if (body[at] !== 0x2c /* , */) return found;
    at = skipSpaces(body, at + 1);
  }
}
