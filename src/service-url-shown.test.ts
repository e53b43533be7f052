import { describe, expect, it } from "vitest";
import { serviceUrlShown } from "./service-url-shown.js";

describe("REDIS_URL as the start line shows it", () => {
  it.each([
    ["redis://:secret@127.0.0.1:6379", "redis://127.0.0.1:6379"],
    ["rediss://app:secret@cache.example.com:6380/2", "rediss://app@cache.example.com:6380/2"],
    ["redis://cache.example.com/1?password=secret&family=6", "redis://cache.example.com/1"],
    ["redis://[::1]:6379", "redis://[::1]:6379"],
  ])("shows %s as %s", (url, shown) => {
    expect(serviceUrlShown(url)).toBe(shown);
  });
});

describe("DATABASE_URL in messages", () => {
  it.each([
    [
      "postgres://user:secret@db.example.com:5433/sluice?sslmode=require",
      "postgres://user@db.example.com:5433/sluice",
    ],
    ["postgresql://db.example.com/sluice?password=secret", "postgresql://db.example.com/sluice"],
    ["socket:/var/run/postgresql?db=sluice&password=secret", "socket:/var/run/postgresql"],
  ])("shows %s as %s", (url, shown) => {
    expect(serviceUrlShown(url)).toBe(shown);
  });
});
