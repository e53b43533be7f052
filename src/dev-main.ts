import { stopOnSignalWhileStarting } from "./stop-while-starting.js";

/**
 * Process entry of `npm run dev` (tsx, watch mode). Through tsx the server's modules take seconds
 * to load on a cold start, so a stop signal is said as one that ends the start from the first
 * moment: the handler is installed before the production entry (src/main.ts) is imported, and taken
 * away once it has run, by when `serve()` has installed its own (it does so before its first await).
 */
const stopLoading = stopOnSignalWhileStarting();
try {
  await import("./main.js");
} finally {
  stopLoading();
}
