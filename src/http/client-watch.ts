import type { ServerResponse } from "node:http";
import { offRefusal, onRefusal } from "../deadline-refusal.js";
import { GatewayError } from "../errors.js";
import { offConnectionClose, onConnectionClose, queuedConnection } from "./queued-answers.js";

/**
 * Watches for a client that leaves before its answer was sent, or for the shutdown's deadline that
 * refuses the call before then: `signal` aborts, so the calls made for it (the provider's) stop at
 * once. `throwIfGone` stops a route that got its answer only after that: the call then fails, and
 * its row records it as aborted (499) with what the answer cost, or as refused (`refusal`, 503).
 * `stop` ends the watch once the answer is out.
 */
export function watchClient(response: ServerResponse): {
  signal: AbortSignal;
  throwIfGone(): void;
  /** The shutdown's refusal (503), if the deadline came before the answer: the call's failure. */
  refusal(): GatewayError | null;
  stop(): void;
} {
  const controller = new AbortController();
  let refusal: GatewayError | null = null;
  const onClose = () => {
    if (!response.writableFinished) controller.abort(new Error("The client disconnected"));
  };
  const onRefused = (error: GatewayError) => {
    refusal = error;
    controller.abort(error);
  };
  response.once("close", onClose);
  // A call pipelined behind another on its connection has no socket yet, and its answer hears no
  // `close` when the client goes: the connection's own close is watched (as ProxyExchange does).
  // Else its provider call ran on for no one, its body's share of SLUICE_MAX_BUFFERED_BODY_BYTES
  // held with it.
  const queuedOn = queuedConnection(response);
  if (queuedOn !== null) onConnectionClose(queuedOn, onClose);
  onRefusal(response, onRefused);
  return {
    signal: controller.signal,
    throwIfGone() {
      if (refusal) throw refusal;
      if (controller.signal.aborted) throw clientDisconnected();
    },
    refusal: () => refusal,
    stop() {
      response.off("close", onClose);
      if (queuedOn !== null) offConnectionClose(queuedOn, onClose);
      offRefusal(response, onRefused);
    },
  };
}

/**
 * The error a call whose client left is failed with: its row records the disconnect (499) and no
 * one reads the answer; retryable, as the same call made again may well be answered.
 */
export function clientDisconnected(): GatewayError {
  return new GatewayError("PROVIDER_ERROR", "The client disconnected", { details: { retryable: true } });
}
