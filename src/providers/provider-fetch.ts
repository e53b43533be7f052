import { Agent, Headers, Response, fetch as undiciFetch } from "undici";

interface ProviderFetchTimeouts {
  connectMs: number;
  headersMs: number;
  idleMs: number;
}

export interface ProviderFetchOptions extends ProviderFetchTimeouts {
  /** The largest answer taken from a provider, in bytes (SLUICE_MAX_PROVIDER_RESPONSE_BYTES). */
  maxResponseBytes: number;
}

/**
 * A provider's answer over SLUICE_MAX_PROVIDER_RESPONSE_BYTES: thrown by the fetch when the
 * answer announces a larger `content-length`, or raised by its body once more bytes than that
 * have come. The structured and image endpoints map it to 502 PROVIDER_ERROR.
 */
export class ProviderResponseTooLarge extends Error {
  override readonly name = "ProviderResponseTooLarge";
  /** `status`: the provider's, for the client's `details.providerStatus`. */
  constructor(
    readonly maxBytes: number,
    readonly status: number,
  ) {
    super(`The provider's answer is larger than SLUICE_MAX_PROVIDER_RESPONSE_BYTES (${maxBytes} bytes)`);
  }
}

/** Statuses whose response has no body (the Response constructor refuses one for them). */
const nullBodyStatuses = new Set([101, 103, 204, 205, 304]);

/**
 * The fetch the AI SDK calls providers with (structured and image endpoints), on an undici Agent
 * with the configured upstream timeouts. Node's global fetch has timeouts of its own (300 s for
 * headers and between body chunks) that no setting reached: a call configured to wait longer was
 * cut at 300 s, and as a failure to reach the provider (502), not a time-out (504).
 *
 * The answer is bounded: the SDK reads a whole answer into memory (up to its own 2 GiB) before it
 * parses it. So the fetch asks for `accept-encoding: identity` (undici's fetch would otherwise ask
 * for gzip and decode it, a few hundred KiB on the wire growing to hundreds of MiB), refuses an
 * announced `content-length` over `maxResponseBytes`, and counts the (decoded) body as it comes,
 * failing it with ProviderResponseTooLarge, and dropping the connection, as soon as it passes the
 * cap: no more than the cap is ever held.
 */
export function createProviderFetch(options: ProviderFetchOptions) {
  const agent = new Agent({
    connect: { timeout: options.connectMs },
    headersTimeout: options.headersMs,
    bodyTimeout: options.idleMs,
  });
  const maxBytes = options.maxResponseBytes;
  const fetch = (async (input: Parameters<typeof globalThis.fetch>[0], init?: RequestInit) => {
    const headers = new Headers(
      (init?.headers ?? (input instanceof Request ? input.headers : undefined)) as ConstructorParameters<
        typeof Headers
      >[0],
    );
    headers.set("accept-encoding", "identity");
    const response = await undiciFetch(input as Parameters<typeof undiciFetch>[0], {
      ...(init as Parameters<typeof undiciFetch>[1]),
      headers,
      dispatcher: agent,
    });
    return bounded(response, maxBytes);
  }) as unknown as typeof globalThis.fetch;
  return { fetch, close: () => agent.close() };
}

/** `response` with its body counted against `maxBytes`; throws when it announces more. */
async function bounded(response: Response, maxBytes: number): Promise<Response> {
  const announced = Number(response.headers.get("content-length") ?? Number.NaN);
  if (announced > maxBytes) {
    await response.body?.cancel().catch(() => {});
    throw new ProviderResponseTooLarge(maxBytes, response.status);
  }
  if (response.body === null || nullBodyStatuses.has(response.status) || response.status < 200)
    return response;
  let seen = 0;
  const counted = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        seen += chunk.byteLength;
        // Erroring the stream cancels the provider's body (the connection is dropped).
        if (seen > maxBytes) controller.error(new ProviderResponseTooLarge(maxBytes, response.status));
        else controller.enqueue(chunk);
      },
    }),
  );
  const wrapped = new Response(counted, {
    status: response.status,
    statusText: latin1Only(response.statusText),
    headers: response.headers,
  });
  Object.defineProperty(wrapped, "url", { value: response.url });
  return wrapped;
}

/**
 * The provider's reason phrase where a Response takes it back (RFC 9112's reason-phrase, one latin-1
 * character a byte), else none. undici decodes it as UTF-8, so a character past U+00FF (most UTF-8
 * outside latin-1), or the U+FFFD of a byte that is not UTF-8, made the Response constructor throw,
 * and a good answer failed as one from a provider not reached. No SDK reads the phrase (RFC 9112 has
 * clients ignore it).
 */
function latin1Only(reason: string): string {
  return /^[\t -~\u0080-\u00ff]*$/.test(reason) ? reason : "";
}
