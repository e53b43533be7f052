import { describe, expect, it } from "vitest";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";

/**
 * The model lists take the paging parameters of the API they stand in for: provider B's `limit`,
 * `after_id` and `before_id` (Anthropic's Models API), provider C's `pageSize` and `pageToken`
 * (Gemini's), provider A's none (OpenAI's list has no parameters). The official SDKs' auto-paging
 * then reads every model exactly once, and a bad value is a 400 in Sluice's envelope.
 */
describe("model list paging through the official SDKs", () => {
  const stage = useProxyStage(sdkClients);

  const get = (path: string) => fetch(`${stage.sluice.url}${path}`);
  const bJson = async (path: string) =>
    (await (await get(path)).json()) as {
      data: Array<{ id: string; created_at?: string }>;
      has_more: boolean;
      first_id: string | null;
      last_id: string | null;
    };

  async function expectBadRequest(path: string, message: RegExp) {
    const response = await get(path);
    expect(response.status, path).toBe(400);
    const body = (await response.json()) as { error: { code: string; message: string; requestId: string } };
    expect(body.error.code).toBe("BAD_REQUEST");
    expect(body.error.message).toMatch(message);
    expect(body.error.requestId).toBe(response.headers.get("x-request-id"));
  }

  /** Every model of provider B's list, in its order, in one page. */
  async function allOfB(): Promise<string[]> {
    const body = await bJson(`/v1/provider-b/${stage.project.projectId}/v1/models?limit=1000`);
    expect(body.has_more).toBe(false);
    return body.data.map((model) => model.id);
  }

  describe("provider B (limit, after_id, before_id)", () => {
    it("lists the newest models first, as provider B does", async () => {
      const body = await bJson(`/v1/provider-b/${stage.project.projectId}/v1/models?limit=1000`);
      const released = body.data.map((model) => Date.parse(String(model.created_at)));
      expect(released.length).toBeGreaterThan(4);
      expect(released).toEqual([...released].sort((left, right) => right - left));
      expect(new Set(released).size).toBeGreaterThan(1);
    });

    it("pages client.models.list({ limit: 2 }) forwards: every model exactly once, two at a time", async () => {
      const all = await allOfB();
      expect(all.length).toBeGreaterThan(4);
      const pages: string[][] = [];
      for await (const page of (await stage.anthropic.models.list({ limit: 2 })).iterPages())
        pages.push(page.data.map((model) => model.id));
      expect(pages.flat()).toEqual(all);
      expect(pages).toHaveLength(Math.ceil(all.length / 2));
      for (const page of pages) expect(page.length).toBeLessThanOrEqual(2);
      const ids: string[] = [];
      for await (const model of stage.anthropic.models.list({ limit: 2 })) ids.push(model.id);
      expect(ids).toEqual(all);
      expect(stage.fake.requests).toEqual([]);
    });

    it("pages backwards from before_id, as the SDK does: the models before it, each once", async () => {
      const all = await allOfB();
      const last = all.at(-1)!;
      const pages: string[][] = [];
      for await (const page of (await stage.anthropic.models.list({ before_id: last, limit: 3 })).iterPages())
        pages.push(page.data.map((model) => model.id));
      // Each page keeps the list's order; the pages go towards its start.
      expect(pages[0]).toEqual(all.slice(-4, -1));
      expect(pages.reverse().flat()).toEqual(all.slice(0, -1));
    });

    it("answers first_id, last_id and has_more for each page; the default page holds 20", async () => {
      const all = await allOfB();
      const first = await bJson(`/v1/provider-b/${stage.project.projectId}/models?limit=3`);
      expect(first).toMatchObject({ has_more: true, first_id: all[0], last_id: all[2] });
      expect(first.data.map((model) => model.id)).toEqual(all.slice(0, 3));
      const next = await bJson(
        `/v1/provider-b/${stage.project.projectId}/v1/models?limit=3&after_id=${all[2]}`,
      );
      expect(next.data.map((model) => model.id)).toEqual(all.slice(3, 6));
      const end = await bJson(`/v1/provider-b/${stage.project.projectId}/v1/models?after_id=${all.at(-1)}`);
      expect(end).toEqual({ data: [], has_more: false, first_id: null, last_id: null });
      const before = await bJson(`/v1/provider-b/${stage.project.projectId}/v1/models?before_id=${all[1]}`);
      expect(before).toMatchObject({ has_more: false, first_id: all[0], last_id: all[0] });
      const plain = await bJson(`/v1/provider-b/${stage.project.projectId}/v1/models`);
      expect(plain.data.map((model) => model.id)).toEqual(all.slice(0, 20));
      expect(plain.has_more).toBe(all.length > 20);
      // The list without a project pages the same way.
      const unscoped = await bJson(`/v1/provider-b/models?limit=2&after_id=${all[0]}`);
      expect(unscoped.data.map((model) => model.id)).toEqual(all.slice(1, 3));
    });

    it("keeps models.retrieve working", async () => {
      const [id] = await allOfB();
      expect(await stage.anthropic.models.retrieve(id!)).toMatchObject({ id, type: "model" });
    });

    it("refuses a limit outside 1–1000, a cursor it does not list, both cursors, or a parameter twice, with 400", async () => {
      const [id] = await allOfB();
      const list = `/v1/provider-b/${stage.project.projectId}/v1/models`;
      for (const limit of ["0", "1001", "5000", "-1", "2.5", "abc", "", "1e2"])
        await expectBadRequest(`${list}?limit=${limit}`, /^limit must be an integer from 1 to 1000/);
      await expectBadRequest(`${list}?after_id=no-such-model`, /^after_id "no-such-model" is not a model/);
      await expectBadRequest(`${list}?before_id=no-such-model`, /^before_id "no-such-model" is not a model/);
      await expectBadRequest(`${list}?after_id=${id}&before_id=${id}`, /after_id or before_id, not both/);
      await expectBadRequest(`${list}?limit=2&limit=3`, /^limit is given more than once/);
      await expectBadRequest(`/v1/provider-b/models?limit=0`, /^limit must be/);
      await expect(stage.anthropic.models.list({ limit: 0 })).rejects.toMatchObject({ status: 400 });
      await expect(stage.anthropic.models.list({ limit: 5000 })).rejects.toMatchObject({ status: 400 });
    });
  });

  describe("provider C (pageSize, pageToken)", () => {
    async function allOfC(): Promise<string[]> {
      const response = await get(`/v1/provider-c/${stage.project.projectId}/v1beta/models?pageSize=1000`);
      const body = (await response.json()) as { models: Array<{ name: string }>; nextPageToken?: string };
      expect(body.nextPageToken).toBeUndefined();
      return body.models.map((model) => model.name);
    }

    it("pages google.models.list({ config: { pageSize: 2 } }): every model exactly once", async () => {
      const all = await allOfC();
      expect(all.length).toBeGreaterThan(4);
      let pager = await stage.google.models.list({ config: { pageSize: 2 } });
      const pages = [pager.page.map((model) => model.name)];
      while (pager.hasNextPage()) {
        await pager.nextPage();
        pages.push(pager.page.map((model) => model.name));
      }
      expect(pages.flat()).toEqual(all);
      for (const page of pages) expect(page.length).toBeLessThanOrEqual(2);
      expect(pages).toHaveLength(Math.ceil(all.length / 2));
      pager = await stage.google.models.list({ config: { pageSize: 3 } });
      const names: Array<string | undefined> = [];
      for await (const model of pager) names.push(model.name);
      expect(names).toEqual(all);
      expect(stage.fake.requests).toEqual([]);
    });

    it("takes a pageSize over 1000 as 1000 and 0 as the default, as Gemini does; refuses a negative one or a token it did not give", async () => {
      const all = await allOfC();
      const list = `/v1/provider-c/${stage.project.projectId}/v1beta/models`;
      // However many digits: the message (and docs/proxy.md) says more than 1000 is taken as 1000.
      for (const size of ["5000", "0", "99999999999", "000000000000000000007000"]) {
        const body = (await (await get(`${list}?pageSize=${size}`)).json()) as {
          models: Array<{ name: string }>;
          nextPageToken?: string;
        };
        expect(body.models.map((model) => model.name)).toEqual(all);
      }
      for (const size of ["-1", "abc", "2.5"])
        await expectBadRequest(`${list}?pageSize=${size}`, /^pageSize must be/);
      await expectBadRequest(`${list}?pageToken=bogus`, /^pageToken .* is not one this list gave/);
      await expectBadRequest(
        `/v1/provider-c/models?pageSize=1&pageSize=2`,
        /^pageSize is given more than once/,
      );
    });
  });

  describe("provider A (no parameters)", () => {
    it("answers the whole list whatever paging parameters are sent, as OpenAI's list does", async () => {
      const plain = (await (await get(`/v1/provider-a/${stage.project.projectId}/models`)).json()) as {
        data: Array<{ id: string }>;
      };
      const paged = (await (
        await get(`/v1/provider-a/${stage.project.projectId}/models?limit=0&after=nope&page_size=-1`)
      ).json()) as { data: Array<{ id: string }> };
      expect(paged).toEqual(plain);
      const ids: string[] = [];
      for await (const model of stage.openai.models.list()) ids.push(model.id);
      expect(ids).toEqual(plain.data.map((model) => model.id));
    });
  });
});
