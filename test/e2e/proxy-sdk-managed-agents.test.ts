import { beforeEach, describe, expect, it } from "vitest";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";

/**
 * The Anthropic SDK's beta Managed Agents calls (`beta.agents`, `beta.environments`,
 * `beta.sessions`) through provider B's proxy, which forwards JSON POSTs only: what passes, what is
 * answered 405, and what the usage rows hold (docs/proxy.md, the calls that do not go through Sluice).
 */
describe("the Anthropic SDK's Managed Agents calls through provider B's proxy", () => {
  const stage = useProxyStage(sdkClients);
  beforeEach(() => stage.fake.clear());

  const noTokens = { input_tokens: null, output_tokens: null, cached_tokens: null, cost_usd: null };
  const agent = { id: "agent_1", type: "agent", name: "a", model: { id: "claude-sonnet-4-5" } };
  /** A session as the API answers it: its cumulative usage, whatever its agent has run so far. */
  const session = (input: number, output: number) => ({
    id: "sesn_1",
    type: "session",
    status: "idle",
    agent,
    usage: { input_tokens: input, output_tokens: output, cache_read_input_tokens: 0 },
  });

  it("forwards agents.create, environments.create, sessions.create and events.send, with the beta header, as calls without tokens", async () => {
    const calls: Array<[() => Promise<unknown>, string, unknown]> = [
      [
        () => stage.anthropic.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" }),
        "/b/v1/agents",
        agent,
      ],
      [
        () => stage.anthropic.beta.environments.create({ name: "e" }),
        "/b/v1/environments",
        { id: "env_1", type: "environment", name: "e" },
      ],
      [
        () => stage.anthropic.beta.sessions.create({ agent: "agent_1", environment_id: "env_1" }),
        "/b/v1/sessions",
        session(0, 0),
      ],
      [
        () =>
          stage.anthropic.beta.sessions.events.send("sesn_1", {
            events: [{ type: "user.message", content: [{ type: "text", text: "Hi" }] }],
          }),
        "/b/v1/sessions/sesn_1/events",
        { data: [] },
      ],
    ];
    for (const [call, path, body] of calls) {
      stage.fake.enqueueResponse({ status: 200, body });
      const row = await stage.rowAddedBy(call);
      const sent = stage.fake.last()!;
      expect(sent).toMatchObject({ method: "POST", path });
      expect(sent.headers["anthropic-beta"]).toBe("managed-agents-2026-04-01");
      expect(row).toMatchObject({ status: 200, outcome: "ok", ...noTokens });
    }
  });

  it("records no tokens from the session's cumulative usage that sessions.update answers with", async () => {
    // The answer repeats what the session's agent has used so far, which Sluice did not see it use.
    stage.fake.enqueueResponse({ status: 200, body: session(5000, 700) });
    const row = await stage.rowAddedBy(() => stage.anthropic.beta.sessions.update("sesn_1", { title: "t" }));
    expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/b/v1/sessions/sesn_1" });
    expect(row).toMatchObject({ status: 200, outcome: "ok", ...noTokens });
  });

  it("forwards the archives, POSTs sent without a body or content type, as a cancel is, recording no session's tokens", async () => {
    const archives: Array<[() => Promise<unknown>, string, unknown]> = [
      [
        () => stage.anthropic.beta.sessions.archive("sesn_1"),
        "/b/v1/sessions/sesn_1/archive",
        session(5000, 700),
      ],
      [() => stage.anthropic.beta.agents.archive("agent_1"), "/b/v1/agents/agent_1/archive", agent],
      [
        () => stage.anthropic.beta.environments.archive("env_1"),
        "/b/v1/environments/env_1/archive",
        { id: "env_1", type: "environment", name: "e" },
      ],
      [
        () => stage.anthropic.beta.sessions.threads.archive("sthr_1", { session_id: "sesn_1" }),
        "/b/v1/sessions/sesn_1/threads/sthr_1/archive",
        { id: "sthr_1", type: "session_thread", usage: { input_tokens: 900, output_tokens: 80 } },
      ],
    ];
    for (const [archive, path, body] of archives) {
      stage.fake.enqueueResponse({ status: 200, body });
      const row = await stage.rowAddedBy(archive);
      const sent = stage.fake.last()!;
      expect(sent).toMatchObject({ method: "POST", path });
      expect(sent.body.length).toBe(0);
      expect(sent.headers["content-type"]).toBeUndefined();
      expect(row).toMatchObject({ status: 200, outcome: "ok", ...noTokens });
    }
  });

  it("still answers a bodiless POST that is neither a cancel nor an archive 415", async () => {
    const row = await stage.rowAddedBy(async () => {
      const error = await stage.anthropic
        .post("/v1/sessions/sesn_1/archived", {})
        .catch((caught: unknown) => caught);
      expect(error).toMatchObject({ status: 415 });
    });
    expect(row).toMatchObject({ status: 415, error_code: "UNSUPPORTED_MEDIA_TYPE" });
    expect(stage.fake.requests).toHaveLength(0);
  });

  it("answers the session's event stream, its retrieval and the lists 405, before any byte reaches the provider", async () => {
    const refused = [
      () => stage.anthropic.beta.sessions.events.stream("sesn_1"),
      () => stage.anthropic.beta.sessions.retrieve("sesn_1"),
      () => stage.anthropic.beta.agents.retrieve("agent_1"),
      () => stage.anthropic.beta.environments.retrieve("env_1"),
      () => stage.anthropic.beta.sessions.list().then((page) => page.data),
      () => stage.anthropic.beta.sessions.delete("sesn_1"),
    ];
    for (const call of refused) {
      const error = await call().catch((caught) => caught);
      expect(error).toMatchObject({ status: 405 });
      expect(String(error.message)).toMatch(
        /is not allowed on this path: provider-b's proxy forwards POST calls only/,
      );
    }
    const error = await stage.anthropic.beta.sessions.events.stream("sesn_1").catch((caught) => caught);
    expect(String(error.message)).toMatch(
      /GET v1\/sessions\/sesn_1\/events\/stream does not go through Sluice/,
    );
    expect(stage.fake.requests).toHaveLength(0);
  });
});
