import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * What a client sends never becomes a label value: after a first round of every kind of request,
 * rounds of fresh junk values (paths, project ids, models, header names and values, methods) add
 * no sample to /metrics and no log field (audit: observe).
 */
describe("metrics under junk values", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      metricsEnabled: true,
      logLevel: "trace",
      // Each round's wrong credentials and unknown ids are refused, not throttled.
      authFailureLimit: 100_000,
    });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  async function round(): Promise<void> {
    const junk = randomBytes(8).toString("hex");
    const bearer = {
      authorization: `Bearer ${project.bearer("provider-a")}`,
      "content-type": "application/json",
    };
    const sends: Array<[string, RequestInit]> = [
      [`/${junk}`, {}],
      [`/v1/${junk}`, { method: "DELETE" }],
      [`/health`, { method: "PUT" }],
      [`/v1/provider-a/prj_${junk}/chat/completions`, { method: "POST", body: "{}", headers: bearer }],
      [
        `/v1/provider-a/${project.projectId}/chat/completions`,
        { method: "POST", body: "{}", headers: { authorization: `Bearer x.${junk}` } },
      ],
      [
        `/v1/provider-a/${project.projectId}/${junk}`,
        {
          method: "POST",
          body: JSON.stringify({ model: junk, messages: [] }),
          headers: { ...bearer, [`x-${junk}`]: junk },
        },
      ],
      [
        `/v1/provider-a/${project.projectId}/chat/completions`,
        { method: "POST", body: JSON.stringify({ model: `gpt-${junk}`, messages: [] }), headers: bearer },
      ],
      [
        `/v1/provider-c/${project.projectId}/v1beta/models/${junk}:generateContent?key=${junk}`,
        { method: "POST", body: "{}", headers: { "x-goog-api-key": project.bearer("provider-c") } },
      ],
      [
        `/v1/text/${project.projectId}`,
        { method: "POST", body: JSON.stringify({ text: junk, model: junk }), headers: bearer },
      ],
      [`/v1/provider-a/prj_${junk}/models`, {}],
      [`/admin/v1/projects/prj_${junk}`, { headers: { authorization: `Bearer ${adminToken}` } }],
      [`/admin/v1/projects`, { headers: { authorization: `Bearer ${junk}` } }],
    ];
    for (const [path, init] of sends) {
      const response = await fetch(`${sluice.url}${path}`, init);
      await response.arrayBuffer();
    }
  }

  const samples = async () =>
    (await (await fetch(`${sluice.url}/metrics`)).text())
      .split("\n")
      .filter((line) => line.startsWith("sluice_") && !/^sluice_(process|nodejs)_/.test(line))
      .map((line) => line.slice(0, line.lastIndexOf(" ")));
  const logFields = () => {
    const fields = new Set<string>();
    for (const line of sluice.logs) for (const key of Object.keys(JSON.parse(line))) fields.add(key);
    return [...fields].sort();
  };

  it("add no sample and no log field, however many distinct values they carry", async () => {
    // The scrape itself is a request: its samples exist before `before` is read.
    await samples();
    await round();
    await round();
    const before = await samples();
    const fieldsBefore = logFields();
    for (let index = 0; index < 30; index++) await round();
    const after = await samples();
    expect(after.filter((sample) => !before.includes(sample))).toEqual([]);
    expect(logFields()).toEqual(fieldsBefore);
    expect(after.join("\n")).not.toMatch(/[0-9a-f]{16}/);
  });
});
