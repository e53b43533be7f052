import { describe, expect, it } from "vitest";
import { finishReadingFetch, watchingFinish } from "./answer-finish-reason.js";

/** Each model's answer: its finish reason, and how long it takes to come (ms). */
const answers: Record<string, { finishReason: string; delay: number }> = {
  slow: { finishReason: "IMAGE_PROHIBITED_CONTENT", delay: 30 },
  fast: { finishReason: "STOP", delay: 0 },
};

/** A fake provider C: `…/models/<model>:<method>` answers that model's candidate. */
const fakeFetch: typeof globalThis.fetch = async (input) => {
  const model = /\/models\/([^:]+):/.exec(String(input))?.[1] ?? "";
  const answer = answers[model] ?? { finishReason: "STOP", delay: 0 };
  await new Promise((resolve) => setTimeout(resolve, answer.delay));
  return Response.json({ candidates: [{ finishReason: answer.finishReason }] });
};
const url = (model: string, method = "generateContent") => `https://c.test/v1beta/models/${model}:${method}`;

describe("finishReadingFetch", () => {
  const fetch = finishReadingFetch(fakeFetch);

  it("keeps each call's finish reason apart when calls run at once", async () => {
    const slow = watchingFinish(() => fetch(url("slow")));
    const fast = watchingFinish(() => fetch(url("fast")));
    await Promise.all([slow.result, fast.result]);
    expect(slow.finish.reason).toBe("IMAGE_PROHIBITED_CONTENT");
    expect(fast.finish.reason).toBe("STOP");
  });

  it("reads only a generateContent answer, and only inside watchingFinish", async () => {
    const predict = watchingFinish(() => fetch(url("slow", "predict")));
    const response = await predict.result;
    expect(predict.finish.reason).toBeNull();
    // The body is the caller's, unread.
    expect(await response.json()).toEqual({ candidates: [{ finishReason: "IMAGE_PROHIBITED_CONTENT" }] });
    const outside = await fetch(url("slow"));
    expect(outside.bodyUsed).toBe(false);
  });
});
