import { describe, expect, it } from "vitest";
import { type AnswerFinish, finishReadingFetch } from "./answer-finish-reason.js";

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
  const watching = () => {
    const finish: AnswerFinish = { reason: null };
    return { fetch: finishReadingFetch(fakeFetch, finish), finish };
  };

  it("notes each call's finish reason in its own fetch's note when calls run at once", async () => {
    const slow = watching();
    const fast = watching();
    await Promise.all([slow.fetch(url("slow")), fast.fetch(url("fast"))]);
    expect(slow.finish.reason).toBe("IMAGE_PROHIBITED_CONTENT");
    expect(fast.finish.reason).toBe("STOP");
  });

  it("reads only a generateContent answer, leaving the body the caller's", async () => {
    const predict = watching();
    const response = await predict.fetch(url("slow", "predict"));
    expect(predict.finish.reason).toBeNull();
    expect(await response.json()).toEqual({ candidates: [{ finishReason: "IMAGE_PROHIBITED_CONTENT" }] });
    const generate = watching();
    const answered = await generate.fetch(url("slow"));
    expect(generate.finish.reason).toBe("IMAGE_PROHIBITED_CONTENT");
    expect(answered.bodyUsed).toBe(false);
    expect(await answered.json()).toEqual({ candidates: [{ finishReason: "IMAGE_PROHIBITED_CONTENT" }] });
  });
});
