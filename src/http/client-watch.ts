import type { ServerResponse } from "node:http";

/**
 * Watches for a client that leaves before its answer was sent: `signal` aborts then, so the calls
 * made for it (the provider's) stop at once. `stop` ends the watch once the answer is out.
 */
export function watchClient(response: ServerResponse): { signal: AbortSignal; stop(): void } {
  const controller = new AbortController();
  const onClose = () => {
    if (!response.writableFinished) controller.abort(new Error("The client disconnected"));
  };
  response.once("close", onClose);
  return { signal: controller.signal, stop: () => response.off("close", onClose) };
}
