import { defineConfig } from "vitest/config";
import { SummaryReporter } from "./test/support/summary-reporter.js";

export default defineConfig({
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: "forks",
    reporters: ["default", new SummaryReporter()],
  },
});
