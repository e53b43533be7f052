import { afterAll, afterEach, beforeAll } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";

/** One fake upstream for a describe's tests, and what each test starts, closed after it. */
export class FakeUpstreamStage {
  /** Started before the describe's first test, closed after its last. */
  fake!: FakeUpstream;
  /** What a test started (gateways, private Redis servers), closed in reverse order after it. */
  readonly closers: Array<() => Promise<void>> = [];
}

/** Registers the stage's hooks in the describe that calls it. */
export function useFakeUpstreamStage(): FakeUpstreamStage {
  const stage = new FakeUpstreamStage();
  beforeAll(async () => {
    stage.fake = await startFakeUpstream();
  });
  afterEach(async () => {
    for (const close of stage.closers.splice(0).reverse()) await close();
  });
  afterAll(async () => {
    await stage.fake?.close();
  });
  return stage;
}
