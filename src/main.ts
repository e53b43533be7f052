import { startFailureMessage } from "./start-failure.js";
import { stopOnSignalWhileStarting } from "./stop-while-starting.js";

/**
 * Process entry of `npm start` and `npm run dev`. A stop signal is said as one that ends the start
 * from the first moment: the server's modules are imported only once the handler is in place (they
 * take seconds to load through tsx on a cold start), and `serve()` replaces it with its own.
 */
const stopLoading = stopOnSignalWhileStarting();
const { serve } = await import("./server.js");
stopLoading();
serve().catch((error: unknown) => {
  process.stderr.write(startFailureMessage(error));
  process.exit(1);
});
