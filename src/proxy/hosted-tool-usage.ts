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
