import { serve } from "./server.js";

/** Process entry of `npm start`. */
serve().catch((error: unknown) => {
  process.stderr.write(`sluice failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
