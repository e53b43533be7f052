import type { IncomingMessage, ServerResponse } from "node:http";
import { type LocalServer, startLocalServer } from "./local-server.js";

/** What a programmed upstream answers the next calls with, streamed or not. */
export interface Programmed {
  /** The answer to a call that does not stream. */
  json: unknown;
  /** The events of a streamed answer, each written apart. */
  events: string[];
  /** Cut the connection after the events, instead of ending the stream. */
  cut?: boolean;
  /** The streamed answer's content type (`text/event-stream` unless given). */
  contentType?: string;
  /** The answer to a call that does not stream, cut: these bytes of it, then the connection closed. */
  cutJson?: string;
}

/** One server-sent event of `data` as JSON, under `event` when one is given. */
export const sse = (data: unknown, event?: string) =>
  `${event === undefined ? "" : `event: ${event}\n`}data: ${JSON.stringify(data)}\n\n`;

/** A call streams when it asks Gemini's `streamGenerateContent`, or says `"stream": true`. */
const streams = (request: IncomingMessage, body: string) =>
  (request.url ?? "").includes("streamGenerateContent") ||
  (JSON.parse(body || "{}") as { stream?: unknown }).stream === true;

function answer(programmed: Programmed, request: IncomingMessage, response: ServerResponse, body: string) {
  if (!streams(request, body)) {
    response.writeHead(200, { "content-type": "application/json" });
    if (programmed.cutJson === undefined) response.end(JSON.stringify(programmed.json));
    else {
      response.write(programmed.cutJson);
      setTimeout(() => response.socket?.destroy(), 50);
    }
    return;
  }
  response.writeHead(200, { "content-type": programmed.contentType ?? "text/event-stream" });
  for (const event of programmed.events) response.write(event);
  if (programmed.cut) setTimeout(() => response.socket?.destroy(), 50);
  else response.end();
}

/**
 * A provider stand-in on a free loopback port that answers every call, on any path, with what
 * `programmed()` holds when the call's body has arrived: the JSON body, or the events of a stream.
 */
export function startProgrammedUpstream(programmed: () => Programmed): Promise<LocalServer> {
  return startLocalServer((request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (part: string) => {
      body += part;
    });
    request.on("end", () => answer(programmed(), request, response, body));
  });
}
