import { describe, expect, it } from "vitest";
import { startFailureMessage } from "./start-failure.js";

describe("the failed-start line", () => {
  it("says why: the message of each cause, as a failed migration wraps the database's error", () => {
    const cause = new Error('relation "projects" already exists');
    const error = new Error("Database migration 0001-initial failed", { cause });
    expect(startFailureMessage(error)).toBe(
      'sluice failed to start: Database migration 0001-initial failed: relation "projects" already exists\n',
    );
    expect(startFailureMessage(new Error("listen EADDRINUSE"))).toBe(
      "sluice failed to start: listen EADDRINUSE\n",
    );
  });
});
