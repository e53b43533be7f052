import { connect } from "node:net";

/**
 * Writes `requests` (raw HTTP/1.1 requests, one after another) on one connection and resolves
 * with the status line of each answer (`HTTP/1.1 429`), once `count` have come or the server closed.
 */
export function pipelinedStatuses(url: string, requests: string, count: number): Promise<string[]> {
  const socket = connect(Number(new URL(url).port), "127.0.0.1");
  let received = "";
  const answered = () => received.match(/HTTP\/1\.1 \d{3}/g) ?? [];
  return new Promise<string[]>((resolve, reject) => {
    socket.on("data", (chunk) => {
      received += chunk;
      if (answered().length >= count) resolve(answered());
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(answered()));
    socket.write(requests);
  }).finally(() => socket.destroy());
}
