/**
 * Process entry of `npm start`. The build is one bundle (docs/decisions/0017): Node maps a stack
 * trace's lines in it to src/*.ts only through the source maps of modules compiled after they are
 * turned on, so they are turned on before the server's modules are imported.
 */
process.setSourceMapsEnabled(true);
const { serve } = await import("./server.js");
const { startFailureMessage } = await import("./start-failure.js");

serve().catch((error: unknown) => {
  process.stderr.write(startFailureMessage(error));
  process.exit(1);
});
