import { describe, expect, it } from "vitest";
import { projectIdHeader, repeatedCredentialHeader } from "./repeated-credential-header.js";

describe("repeatedCredentialHeader", () => {
  it("finds nothing when each credential header comes once", () => {
    const raw = [
      "Host",
      "sluice.test",
      "Authorization",
      "Bearer a.b",
      "X-AI-Key",
      "k",
      "x-sluice-test-key",
      "t",
      "X-Device-Token",
      "d",
      "Accept",
      "a",
      "Accept",
      "b",
    ];
    expect(repeatedCredentialHeader(raw)).toBeNull();
    expect(repeatedCredentialHeader(raw, "x-api-key")).toBeNull();
    expect(repeatedCredentialHeader([])).toBeNull();
  });

  it("names a repeated credential header in lower case, whatever case each copy was sent in", () => {
    for (const name of ["authorization", "x-sluice-test-key", "x-ai-key", "x-device-token"]) {
      const raw = ["Host", "h", name.toUpperCase(), "one", "Accept", "*/*", name, "two"];
      expect(repeatedCredentialHeader(raw), name).toBe(name);
      expect(repeatedCredentialHeader(raw, "x-goog-api-key"), name).toBe(name);
    }
  });

  it("checks a provider SDK's key header only where authentication reads it", () => {
    const raw = ["x-api-key", "one", "X-Api-Key", "two"];
    expect(repeatedCredentialHeader(raw, "x-api-key")).toBe("x-api-key");
    expect(repeatedCredentialHeader(raw, "x-goog-api-key")).toBeNull();
    expect(repeatedCredentialHeader(raw)).toBeNull();
    const google = ["X-Goog-Api-Key", "one", "x-goog-api-key", "two"];
    expect(repeatedCredentialHeader(google, "x-goog-api-key")).toBe("x-goog-api-key");
  });

  it("does not take a value, or a name that only looks alike, for a credential header", () => {
    expect(
      repeatedCredentialHeader([
        "x-note",
        "authorization",
        "x-other",
        "authorization",
        "authorizatioN-x",
        "v",
        "authorizatiom",
        "v",
      ]),
    ).toBeNull();
  });
});

describe("projectIdHeader", () => {
  it("reads the first x-project-id, in any letter case, and says whether another came", () => {
    expect(projectIdHeader(["Host", "h", "Accept", "*/*"])).toEqual({ value: undefined, repeated: false });
    expect(projectIdHeader(["X-Project-Id", "p1", "Accept", "*/*"])).toEqual({
      value: "p1",
      repeated: false,
    });
    // One header whose value holds a comma is sent once: it names no project, but is no repeat.
    expect(projectIdHeader(["x-project-id", "p1, p2"])).toEqual({ value: "p1, p2", repeated: false });
    expect(projectIdHeader(["x-project-id", "p1", "Accept", "a", "X-PROJECT-ID", "p1"])).toEqual({
      value: "p1",
      repeated: true,
    });
    expect(projectIdHeader(["x-project-id", "", "x-project-id", "p2"])).toEqual({
      value: "",
      repeated: true,
    });
    expect(projectIdHeader(["x-project-ids", "p1", "x-project-id", "p2"])).toEqual({
      value: "p2",
      repeated: false,
    });
  });
});
