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

  it("does not repeat a cause whose message its wrapper already ends with, but goes on to its causes", () => {
    const driver = new Error("connect ECONNREFUSED 127.0.0.1:5432");
    const unavailable = new Error("The gateway's database is unavailable", { cause: driver });
    const error = new Error(`project "x": ${unavailable.message}`, { cause: unavailable });
    expect(startFailureMessage(error)).toBe(
      `sluice failed to start: project "x": The gateway's database is unavailable: connect ECONNREFUSED 127.0.0.1:5432\n`,
    );
  });
});
