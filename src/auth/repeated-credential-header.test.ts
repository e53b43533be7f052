import { describe, expect, it } from "vitest";
import { repeatedCredentialHeader } from "./repeated-credential-header.js";

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
