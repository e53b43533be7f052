import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";
import { SummaryReporter } from "./test/support/summary-reporter.js";

/**
 * The files that use the checkout's own build (dist/): `npm start` rebuilds it, and bin/sluice.js
 * in the checkout runs it while it is current. Run one at a time, after the others, so that no
 * file reads dist/ while another one rebuilds it.
 */
const checkoutBuild = ["test/e2e/npm-start.test.ts", "test/e2e/cli-beside-gateway.test.ts"];

/**
 * Vitest runs `availableParallelism() - 1` files at once by default: one on a 2-core machine, where
 * the suite then leaves a core idle (most files wait on sockets, timers and child processes, not
 * on CPU). Every file works on its own PostgreSQL schema, Redis key prefix, data dir and ports, so
 * two run at once there; larger machines keep the default.
 */
const cores = availableParallelism();
const filesAtOnce = cores >= 2 ? Math.max(2, cores - 1) : 1;

export default defineConfig({
  test: {
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: "forks",
    reporters: ["default", new SummaryReporter()],
    projects: [
      {
        extends: true,
        test: {
          name: "files",
          include: ["src/**/*.test.ts", "test/**/*.test.ts"],
          exclude: checkoutBuild,
          maxWorkers: filesAtOnce,
        },
      },
      {
        extends: true,
        test: {
          name: "checkout-build",
          include: checkoutBuild,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
