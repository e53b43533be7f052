/**
 * A port on 127.0.0.1 that nothing listens on, so a connection to it is refused (ECONNREFUSED).
 * Port 2 is below 1024 and outside the kernel's ephemeral range: no test in a parallel worker that
 * listens on port 0 can be given it, as it can be given a port another test has just closed. Not
 * port 1: fetch (undici) refuses the Fetch standard's "bad ports", 1 among them, before connecting.
 */
export const refusedPort = 2;
