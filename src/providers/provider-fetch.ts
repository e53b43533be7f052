import { Agent, fetch as undiciFetch } from "undici";

export interface ProviderFetchTimeouts {
  connectMs: number;
  headersMs: number;
  idleMs: number;
}

/**
 * The fetch the AI SDK calls providers with (structured and image endpoints), on an undici Agent
 * with the configured upstream timeouts. Node's global fetch has timeouts of its own (300 s for
 * headers and between body chunks) that no setting reached: a call configured to wait longer was
 * cut at 300 s, and as a failure to reach the provider (502), not a time-out (504).
 */
export function createProviderFetch(timeouts: ProviderFetchTimeouts) {
  const agent = new Agent({
    connect: { timeout: timeouts.connectMs },
    headersTimeout: timeouts.headersMs,
    bodyTimeout: timeouts.idleMs,
  });
  const fetch = ((input: Parameters<typeof globalThis.fetch>[0], init?: RequestInit) =>
    undiciFetch(input as Parameters<typeof undiciFetch>[0], {
      ...(init as Parameters<typeof undiciFetch>[1]),
      dispatcher: agent,
    })) as unknown as typeof globalThis.fetch;
  return { fetch, close: () => agent.close() };
}
