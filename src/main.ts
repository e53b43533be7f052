import { serve } from "./server.js";
import { startFailureMessage } from "./start-failure.js";

/** Process entry of `npm start`. */
serve().catch((error: unknown) => {
  process.stderr.write(startFailureMessage(error));
  process.exit(1);
});
