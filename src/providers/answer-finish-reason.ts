/**
 * The finish reason one provider call's answer named, for what the AI SDK does not pass on: a
 * Gemini image model's `IMAGE_PROHIBITED_CONTENT`, `IMAGE_RECITATION`, `IMAGE_OTHER` and `NO_IMAGE`
 * are ordinary finishes to it, and its image model drops the answer's body (docs/decisions/0020).
 */
export interface AnswerFinish {
  /** `candidates[0].finishReason` of a provider C `generateContent` answer; null when none was read. */
  reason: string | null;
}

/**
 * A fetch that notes, in `finish`, the finish reason of a successful provider C `generateContent`
 * answer, read from a copy of its body before the SDK reads it; any other call passes through
 * untouched. A body that fails to arrive (a time-out, an answer over the cap) leaves the reason
 * unknown: the SDK reads the same failure.
 *
 * The note is the fetch's own: a model built with it must make one provider call only, so that
 * what it notes is that call's, however many calls of a request run at once (generate-image.ts
 * builds one per call). Not an AsyncLocalStorage: on Node 20 its first use turns on async hooks
 * for the whole process, and every promise after, the proxies' included, pays for them.
 */
export function finishReadingFetch(
  base: typeof globalThis.fetch,
  finish: AnswerFinish,
): typeof globalThis.fetch {
  return async (input, init) => {
    const response = await base(input, init);
    if (!response.ok || !urlOf(input).endsWith(":generateContent")) return response;
    const answer = await response
      .clone()
      .json()
      .catch(() => null);
    const candidates = (answer as { candidates?: unknown } | null)?.candidates;
    const reason = Array.isArray(candidates)
      ? (candidates[0] as { finishReason?: unknown } | undefined)?.finishReason
      : undefined;
    finish.reason = typeof reason === "string" ? reason : null;
    return response;
  };
}

function urlOf(input: Parameters<typeof globalThis.fetch>[0]): string {
  if (typeof input === "string") return input;
  return input instanceof URL ? input.href : input.url;
}
