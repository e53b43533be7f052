import { describe, expect, it } from "vitest";
import { createProviderAdapters } from "../providers/provider-adapter.js";
import { providerIds } from "../providers/provider-id.js";
import { methodNotForwarded, type ProxyRouteDeps, registerProxyRoutes } from "./proxy-routes.js";
import { Router } from "./router.js";

const adapters = createProviderAdapters({
  providerABaseUrl: "https://api.openai.com/v1",
  providerBBaseUrl: "https://api.anthropic.com/v1",
  providerCBaseUrl: "https://generativelanguage.googleapis.com/v1beta",
  providerBVersion: "2023-06-01",
  clientIdentifier: "sluice/1.0.0",
});

describe("methodNotForwarded (the 405 message of a proxy)", () => {
  // The route table registers each proxy's methods; the 405 message must say the same, or a method
  // one of them takes would be refused with a message that says it is not forwarded (or the reverse).
  it("names a proxy's refused method exactly where its route does not take it", () => {
    const router = new Router();
    // Only the route table is read: no handler runs.
    registerProxyRoutes(router, { adapters } as ProxyRouteDeps);
    for (const provider of providerIds) {
      const path = `/v1/${provider}/project-1/messages/batches/b1`;
      for (const method of ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"]) {
        const lookup = router.find(method, path);
        const message = methodNotForwarded(method, path);
        if (lookup.kind === "found") expect(message, `${method} ${provider}`).toBeNull();
        else if (adapters[provider].methods.includes("GET"))
          expect(message, `${method} ${provider}`).toBeNull();
        else
          expect(message, `${method} ${provider}`).toBe(
            `${method} is not allowed on this path: ${provider}'s proxy forwards ${adapters[provider].methods.join(", ")} calls only: ${method} messages/batches/b1 does not go through Sluice (retrieving, listing, downloading, updating or deleting a batch, file, cache or operation is done with the provider directly; see docs/proxy.md)`,
          );
      }
    }
  });

  it("quotes at most 200 characters of the provider path it refuses", () => {
    const long = `files/${"x".repeat(5000)}`;
    const message = methodNotForwarded("DELETE", `/v1/provider-b/project-1/${long}`);
    expect(message).toContain(` DELETE ${long.slice(0, 200)} does not go through Sluice`);
    expect(message?.length).toBeLessThan(600);
  });

  it("leaves every other path to the generic message", () => {
    expect(methodNotForwarded("GET", "/v1/provider-d/project-1/messages")).toBeNull();
    expect(methodNotForwarded("GET", "/admin/v1/projects")).toBeNull();
    expect(methodNotForwarded("GET", "/v1/provider-b/project-1")).toBeNull();
  });
});
