import type { IncomingMessage } from "node:http";

/** The key Sluice injected, as each provider receives it (provider A's bearer, B's and C's headers). */
export function injectedKey(request: IncomingMessage): string {
  const bearer = (request.headers.authorization ?? "").replace(/^Bearer /, "");
  return bearer || String(request.headers["x-api-key"] ?? request.headers["x-goog-api-key"] ?? "");
}

/**
 * A call of each provider's proxy (provider, path, JSON body), with the header the provider expects
 * its full key in and that header's value for a key.
 */
export const proxyKeyCalls = [
  [
    "provider-a",
    "chat/completions",
    { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] },
    "authorization",
    (key: string) => `Bearer ${key}`,
  ],
  [
    "provider-b",
    "messages",
    { model: "claude-sonnet-4-5", max_tokens: 16, messages: [{ role: "user", content: "Hi" }] },
    "x-api-key",
    (key: string) => key,
  ],
  [
    "provider-c",
    "models/gemini-2.5-flash:generateContent",
    { contents: [{ parts: [{ text: "Hi" }] }] },
    "x-goog-api-key",
    (key: string) => key,
  ],
] as const;
