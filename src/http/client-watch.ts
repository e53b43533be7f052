import type { ServerResponse } from "node:http";
import { GatewayError } from "../errors.js";

/**
 * Watches for a client that leaves before its answer was sent: `signal` aborts then, so the calls
 * made for it (the provider's) stop at once. `throwIfGone` stops a route that got its answer only
 * after the client left: the call then fails, and its row records it as aborted (499) with what the
 * answer cost. `stop` ends the watch once the answer is out.
 */
export function watchClient(response: ServerResponse): {
  signal: AbortSignal;
  throwIfGone(): void;
  stop(): void;
} {
  const controller = new AbortController();
  const onClose = () => {
    if (!response.writableFinished) controller.abort(new Error("The client disconnected"));
  };
  response.once("close", onClose);
  return {
    signal: controller.signal,
    throwIfGone() {
      if (controller.signal.aborted) throw new GatewayError("PROVIDER_ERROR", "The client disconnected");
    },
    stop: () => response.off("close", onClose),
  };
}
