import { isIP, connect as netConnect, type Socket } from "node:net";
import { type ConnectionOptions, connect as tlsConnect } from "node:tls";

/**
 * A PostgreSQL backend as a CancelRequest names it, with where and how its session was opened: its
 * process id and secret key from the BackendKeyData the server (or a pooler in front of it) sent at
 * the start, and the host (a Unix socket's directory when it begins with `/`), port and TLS settings
 * of its connection, as pg read them from DATABASE_URL (a pg `Client`'s `host`, `port` and
 * `connectionParameters.ssl` / `sslnegotiation`).
 */
export interface CancelTarget {
  processID: number;
  secretKey: number;
  host: string;
  port: number;
  ssl: boolean | ConnectionOptions;
  sslNegotiation?: "postgres" | "direct" | undefined;
}

/**
 * A CancelRequest on its way: `settled` resolves once it is done with. `destroy` cuts it: at once
 * while its 16 bytes are not sent; once they are, when the server closes its connection or
 * `cancelGraceMs` later, whichever comes first.
 */
export interface CancelRequest {
  settled: Promise<void>;
  destroy(): void;
}

/**
 * How long `destroy` leaves a cancel whose 16 bytes are sent for the server to close. PgBouncer
 * before 1.19.1 mishandles a cancel's connection that its sender closes before PgBouncer has
 * finished passing the cancel on, and can close an unrelated client that logged in meanwhile
 * (pgbouncer#801); it closes the connection itself 1 to 2 ms after the query has stopped.
 */
export const cancelGraceMs = 50;

const cancelRequestCode = 80877102;
const sslRequestCode = 80877103;

/**
 * Sends PostgreSQL's CancelRequest for `target`'s backend (the protocol's "Canceling Requests in
 * Progress"): a connection of its own to the same host and port, which carries 16 bytes (length,
 * code, process id, secret key) and which the server closes once it has acted on them. No session,
 * no authentication: it costs the server no more than a connection accepted, and a pooler
 * (PgBouncer), whose backend keys are its own, passes it on to the server's backend. It is sent
 * inside TLS when the session's connection uses TLS (an SSLRequest first, or TLS at once with
 * `sslnegotiation=direct`), with the same settings (its CA, certificate checks and client
 * certificate), as libpq does since PostgreSQL 17, so the secret key never goes over the network
 * in the clear and a proxy that routes by TLS's server name finds the server; pg's own
 * `Client.cancel` sends it in plain text. A server that then refuses TLS (`N`) gets nothing, as
 * the session's connection would have failed.
 *
 * Fire and forget: it settles, never rejects, when the server closes the connection (as libpq
 * waits for, so the cancel has landed before the session's connection goes), on an error, or at
 * `timeoutMs`, when it is cut. Cut sooner (`destroy`: the database closes) once its 16 bytes are
 * sent, it is left `cancelGraceMs` for the server to close it first.
 */
export function sendCancelRequest(target: CancelTarget, timeoutMs: number): CancelRequest {
  const packet = Buffer.alloc(16);
  packet.writeInt32BE(16, 0);
  packet.writeInt32BE(cancelRequestCode, 4);
  packet.writeInt32BE(target.processID, 8);
  packet.writeInt32BE(target.secretKey, 12);
  const socket = target.host.startsWith("/")
    ? netConnect(`${target.host}/.s.PGSQL.${target.port}`)
    : netConnect(target.port, target.host);
  const sockets: Socket[] = [socket];
  const cut = () => {
    for (const each of sockets) each.destroy();
  };
  /** Whether the 16 bytes were handed to the connection: `destroy` then leaves the server its grace. */
  let sent = false;
  let finished = false;
  let grace: NodeJS.Timeout | undefined;
  const send = (on: Socket) => {
    sent = true;
    on.write(packet);
  };
  const destroy = () => {
    // Nothing is sent meanwhile, not even our side's end: PgBouncer's bug is a client closing first.
    if (finished) return;
    if (sent) grace ??= setTimeout(cut, cancelGraceMs);
    else cut();
  };
  const settled = new Promise<void>((resolve) => {
    // The timeout is a cancel's bound, the grace's included: it cuts at once.
    const timer = setTimeout(cut, timeoutMs);
    const done = () => {
      finished = true;
      clearTimeout(timer);
      clearTimeout(grace);
      cut();
      resolve();
    };
    const watch = (each: Socket) => {
      each.on("error", done);
      each.on("close", done);
      // Nothing is answered to a cancel; whatever comes is read and dropped until the close.
      each.resume();
    };
    const overTls = () => {
      let secure: Socket;
      try {
        secure = tlsConnect(tlsOptions(target, socket));
      } catch {
        // Settings Node's TLS refuses (a key it cannot read): the session's connection failed too.
        done();
        return;
      }
      sockets.push(secure);
      watch(secure);
      secure.once("secureConnect", () => send(secure));
    };
    socket.setNoDelay(true);
    socket.on("error", done);
    socket.on("close", done);
    if (!target.ssl) {
      socket.once("connect", () => send(socket));
      socket.resume();
    } else if (target.sslNegotiation === "direct") socket.once("connect", overTls);
    else {
      const request = Buffer.alloc(8);
      request.writeInt32BE(8, 0);
      request.writeInt32BE(sslRequestCode, 4);
      socket.once("connect", () => socket.write(request));
      // The answer is one byte, and nothing follows it before the TLS handshake.
      socket.once("data", (answer: Buffer) => {
        if (answer.length === 1 && answer[0] === 0x53) overTls();
        else done();
      });
    }
  });
  return { settled, destroy };
}

/** TLS's options for `target`, as pg builds them for its sessions (its `upgradeToSSL`). */
function tlsOptions(target: CancelTarget, socket: Socket): ConnectionOptions {
  const options: ConnectionOptions = { socket, host: target.host };
  if (target.ssl !== true && target.ssl !== false) {
    Object.assign(options, target.ssl);
    // pg makes the client key non-enumerable (kept out of logs), which `Object.assign` skips.
    if ("key" in target.ssl) options.key = target.ssl.key;
  }
  if (target.sslNegotiation === "direct") options.ALPNProtocols = ["postgresql"];
  // No server name for an IP address (RFC 6066 §3).
  if (isIP(target.host) === 0) options.servername = target.host;
  return options;
}
