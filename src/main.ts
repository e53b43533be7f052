import { serve } from "./server.js";
import { startFailureMessage } from "./start-failure.js";

/**
 * Process entry of `npm start` (the production build, dist/src/main.js). The server is imported
 * statically: imported with `await import()` after a stop-signal handler, as `npm run dev`'s entry
 * does (src/dev-main.ts), the production build's process held 7 to 18 MiB more after the
 * benchmark's load (RSS after load 141–153 MiB in four runs against 128–136 in five with the static
 * import, the same build otherwise), and its bundle loads in well under a second, where tsx takes
 * seconds.
 */
serve().catch((error: unknown) => {
  process.stderr.write(startFailureMessage(error));
  process.exit(1);
});
