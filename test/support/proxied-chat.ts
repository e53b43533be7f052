/** What a proxied chat call needs of its project: its id and the Bearer value it sends. */
export interface ChatProject {
  projectId: string;
  /** The Bearer value, or how to make it (a TestProject's `bearer`, asked for provider A's). */
  bearer: string | ((provider: "provider-a") => string);
}

export interface ProxiedChatOptions {
  /** Sent as it is when a string or a Buffer, as JSON otherwise; by default a gpt-4o-mini call without messages. */
  body?: string | Buffer | Record<string, unknown>;
  /** Headers sent besides the authorization and content-type ones (x-forwarded-for, say). */
  headers?: Record<string, string>;
}

/**
 * A provider A chat completion through the gateway at `baseUrl`, as a client of the project makes
 * it: a JSON POST with the project's Bearer value. For tests whose point is what the gateway does
 * with the call, not the exact shape of the request.
 */
export function proxiedChat(
  baseUrl: string,
  project: ChatProject,
  options: ProxiedChatOptions = {},
): Promise<Response> {
  const bearer = typeof project.bearer === "string" ? project.bearer : project.bearer("provider-a");
  const body = options.body ?? { model: "gpt-4o-mini", messages: [] };
  return fetch(`${baseUrl}/v1/provider-a/${project.projectId}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json", ...options.headers },
    body: typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
}

/** The status of `proxiedChat`'s answer, its body read (and so its connection free again). */
export async function proxiedChatStatus(
  baseUrl: string,
  project: ChatProject,
  options: ProxiedChatOptions = {},
): Promise<number> {
  const response = await proxiedChat(baseUrl, project, options);
  await response.arrayBuffer();
  return response.status;
}

/**
 * Reads a streamed answer's first chunk, then the rest in the background: `rest` says whether the
 * stream ended whole or was cut (its read failed).
 */
export async function afterFirstChunk(response: Response): Promise<{ rest: Promise<"whole" | "cut"> }> {
  const reader = response.body!.getReader();
  await reader.read();
  const rest = (async () => {
    try {
      while (!(await reader.read()).done);
      return "whole" as const;
    } catch {
      return "cut" as const;
    }
  })();
  return { rest };
}
