import type { Config } from "../../src/config.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { createPostgresSchema } from "./services.js";
import { startTcpProxy } from "./tcp-proxy.js";
import { startTestGateway, type TestGateway } from "./test-gateway.js";

/**
 * A gateway on a PostgreSQL schema of its own, reached through a TCP proxy the test can cut or
 * stall, with a fake upstream as provider A; `close()` cuts the proxy first, so a stalled database
 * cannot hold the gateway's close, and drops the schema.
 */
export async function startProxiedPostgresGateway(overrides: Partial<Config> = {}) {
  const schema = await createPostgresSchema();
  const proxy = await startTcpProxy(5432);
  const fake: FakeUpstream = await startFakeUpstream();
  const sluice: TestGateway = await startTestGateway({
    databaseUrl: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
    providerABaseUrl: `${fake.url}/a/v1`,
    ...overrides,
  });
  return {
    schema,
    proxy,
    fake,
    sluice,
    async close() {
      proxy.cut();
      await sluice.close();
      await proxy.close();
      await fake.close();
      await schema.drop();
    },
  };
}
