import type { ServerResponse } from "node:http";
import { renderError } from "../errors.js";

export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const payload = Buffer.from(JSON.stringify(body));
  sendBytes(response, status, payload, "application/json; charset=utf-8", headers);
}

export function sendBytes(
  response: ServerResponse,
  status: number,
  payload: Buffer,
  contentType: string,
  headers: Record<string, string> = {},
): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  setHeaders(response, headers);
  response.setHeader("content-type", contentType);
  response.setHeader("content-length", payload.length);
  response.statusCode = status;
  response.end(payload);
}

export function setHeaders(response: ServerResponse, headers: Record<string, string>): void {
  for (const name in headers) response.setHeader(name, headers[name] as string);
}

/** Renders any thrown value as the error envelope; a response already under way is cut instead. */
export function sendError(response: ServerResponse, error: unknown, requestId: string): number {
  const { status, body, headers } = renderError(error, requestId);
  sendJson(response, status, body, { ...headers, "x-request-id": requestId });
  return status;
}
