import { describe, expect, it } from "vitest";
import { parseCommandLine } from "./parse-command-line.js";
import { UsageError } from "./usage-error.js";

/** A flag written without its value, or a switch given one: the CLI's words, not node:util's. */
describe("a flag's value missing or given to a switch", () => {
  function refusal(argv: string[]): string {
    try {
      parseCommandLine(argv);
    } catch (error) {
      expect(error).toBeInstanceOf(UsageError);
      return (error as Error).message;
    }
    throw new Error(`${argv.join(" ")} was taken`);
  }

  it.each([
    [["projects", "create", "--provider", "provider-a", "--name"], "--name"],
    [["usage", "p", "--from"], "--from"],
    [["keys", "add", "p", "--provider", "provider-a", "--api-key"], "--api-key"],
  ])("%j names the flag that needs a value", (argv, flag) => {
    expect(refusal(argv)).toBe(`${flag} needs a value: ${flag} VALUE (or ${flag}=VALUE)`);
  });

  it("says that --api-key-stdin takes no value, without quoting the one given", () => {
    const key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123";
    const message = refusal(["keys", "add", "p", "--provider", "provider-a", `--api-key-stdin=${key}`]);
    expect(message).toBe(
      "--api-key-stdin takes no value: it reads the provider key from standard input (to give the key on the command line, use --api-key)",
    );
    expect(message).not.toContain("sk-proj");
  });
});
