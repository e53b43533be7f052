import { reportsHostedToolUse } from "../providers/usage-from-json.js";
import type { TokenUsage } from "../usage/token-usage.js";
import { lastUsageObject } from "./json-body-usage.js";

const toolUsageKey = Buffer.from('"tool_usage"');

/**
 * (Provider A's Responses API) `usage` marked as a call whose hosted tools ran at a cost of their
 * own (TokenUsage.hostedToolUse), when the response object says so in its `tool_usage`, a member of
 * its own: of the JSON body (`depth` 1; a body over the meter's cap: its last bytes), or of the
 * `response` of the stream event that carried the usage (2). A `tool_usage` nested deeper (in the
 * app's tool schemas the object echoes) is not it (lastUsageObject). Unchanged when the answer
 * reports no tokens: its cost is unknown already. `ranUnseen`: a hosted tool is known to have run
 * (its stream's events said so), and a `tool_usage` not in `body` (the last bytes of an event over
 * the scanner's cap, where the tools echoed after it may fill them) is taken to report its use.
 */
export function withHostedToolUse(
  usage: TokenUsage,
  body: Buffer | null,
  depth: 1 | 2,
  ranUnseen = false,
): TokenUsage {
  if (body === null || (usage.inputTokens === null && usage.outputTokens === null)) return usage;
  const found = lastUsageObject(body, toolUsageKey, depth);
  const used = found === null ? ranUnseen : reportsHostedToolUse(found.value);
  return used ? { ...usage, hostedToolUse: true } : usage;
}

/**
 * Whether the bytes of a JSON body passing through name an output item of a hosted tool that
 * `tool_usage` bills apart (`"image_generation_call"`, `"web_search_call"`): withHostedToolUse's
 * `ranUnseen` for a body over the meter's cap, read from its ends, whose kept tail the tools echoed
 * after its `tool_usage` may fill, as isHostedToolEvent is for a stream. The quoted name cannot
 * match inside a string (its quotes would be escaped); a key or value of that name in the app's own
 * tools makes the cost unknown only where `tool_usage` is not seen. A name split across chunks is
 * found: the last bytes of one are kept for the next.
 */
export class HostedToolWatch {
  seen = false;
  private carry: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): void {
    if (this.seen) return;
    const keep = longestName - 1;
    if (this.carry.length > 0 && this.has(Buffer.concat([this.carry, chunk.subarray(0, keep)]))) return;
    if (this.has(chunk)) return;
    const tail =
      chunk.length >= keep ? chunk.subarray(chunk.length - keep) : Buffer.concat([this.carry, chunk]);
    this.carry = Buffer.from(tail.subarray(Math.max(0, tail.length - keep)));
  }

  private has(bytes: Buffer): boolean {
    this.seen = hostedToolNames.some((name) => bytes.includes(name));
    return this.seen;
  }
}

const hostedToolNames = ['"image_generation_call"', '"web_search_call"'].map((name) => Buffer.from(name));
const longestName = Math.max(...hostedToolNames.map((name) => name.length));
