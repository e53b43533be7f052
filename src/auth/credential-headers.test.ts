import { describe, expect, it } from "vitest";
import { bearerToken, bearerValue } from "./credential-headers.js";

/** The pattern `bearerToken` reads without: what it must agree with. */
const pattern = /^bearer[ \t]+(\S*)[ \t]*$/i;

describe("bearerToken", () => {
  it("reads what the pattern captures, on random strings near its edges", () => {
    // Letters of the scheme in both cases and their near misses (`@` is `` ` `` without 0x20, ſ
    // upper-cases to S, K is the Kelvin sign), every JavaScript white space and a few that are not.
    const alphabet = [
      ..."bearerBEARERxX.-_=@`",
      "ſ",
      "K",
      " ",
      "\t",
      "\n",
      "\v",
      "\f",
      "\r",
      "\u0085",
      "\u00a0",
      "\u1680",
      "\u180e",
      "\u2000",
      "\u200a",
      "\u200b",
      "\u2028",
      "\u2029",
      "\u202f",
      "\u205f",
      "\u3000",
      "\ufeff",
    ];
    let seed = 20261129;
    const random = (below: number) => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % below;
    };
    const pick = () => alphabet[random(alphabet.length)] as string;
    const spaces = () => Array.from({ length: random(3) }, () => (random(2) === 0 ? " " : "\t")).join("");
    let matched = 0;
    for (let round = 0; round < 50_000; round++) {
      const scheme = [..."bearer"].map((letter) =>
        random(8) === 0 ? pick() : random(2) ? letter.toUpperCase() : letter,
      );
      const token = Array.from({ length: random(6) }, pick).join("");
      const value = `${random(20) === 0 ? pick() : ""}${scheme.join("")}${spaces()}${token}${spaces()}${random(10) === 0 ? pick() : ""}`;
      const expected = pattern.exec(value)?.[1];
      if (expected !== undefined) matched++;
      expect(bearerToken(value), JSON.stringify(value)).toBe(expected);
    }
    // Both outcomes were tried many times.
    expect(matched).toBeGreaterThan(5_000);
    expect(matched).toBeLessThan(45_000);
  });

  it("takes the token after `Bearer` in any case, and refuses other schemes", () => {
    expect(bearerValue({ authorization: "Bearer abc.def" }, undefined)).toBe("abc.def");
    expect(bearerValue({ authorization: "bEaReR \t abc \t" }, undefined)).toBe("abc");
    expect(bearerValue({ authorization: "Bearer " }, undefined)).toBe("");
    expect(bearerValue({ authorization: "Bearerabc" }, undefined)).toBe("");
    expect(bearerValue({ authorization: "Bearer a b" }, "x-api-key")).toBe("");
    expect(bearerValue({ authorization: "Basic abc", "x-api-key": "k" }, "x-api-key")).toBe("k");
    expect(bearerValue({ "x-goog-api-key": "g" }, "x-goog-api-key")).toBe("g");
    expect(bearerValue({}, undefined)).toBeUndefined();
  });
});
