import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { modelsFor } from "../usage/model-catalogue.js";
import { fitImageRequest, imageModelRules, parseImageRequest } from "./image-request.js";

function refusal(providerOptions: unknown): GatewayError {
  try {
    parseImageRequest({ prompt: "x", providerOptions });
  } catch (error) {
    if (error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error("the request was accepted");
}

describe("image request provider options", () => {
  it.each([
    ["provider-a", "style", ["vivid", "natural"]],
    ["provider-a", "quality", ["low", "medium", "high", "auto", "standard", "hd"]],
    ["provider-c", "safetyFilterLevel", ["block_most", "block_fewest", "block_low_and_above", "block_none"]],
    ["provider-c", "personGeneration", ["dont_allow", "allow_adult", "allow_all"]],
  ])("keeps every documented %s %s value", (provider, name, values) => {
    for (const value of values) {
      const request = parseImageRequest({ prompt: "x", providerOptions: { [provider]: { [name]: value } } });
      expect(request.providerOptions).toEqual({ [provider]: { [name]: value } });
      expect(request.warnings).toEqual([]);
    }
  });

  it.each([
    ["provider-a", "quality", "ultra"],
    ["provider-a", "style", "bold"],
    ["provider-c", "safetyFilterLevel", "strict"],
    ["provider-c", "personGeneration", "hd"],
  ])("refuses %s %s %j with 422 naming the option and its values", (provider, name, value) => {
    const error = refusal({ [provider]: { [name]: value } });
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toContain(`providerOptions.${provider}.${name}`);
    expect(error.details).toEqual({
      option: `providerOptions.${provider}.${name}`,
      allowed: expect.arrayContaining([expect.any(String)]),
    });
  });

  it("refuses a value that is not a string with 400", () => {
    expect(refusal({ "provider-a": { quality: 1 } }).code).toBe("BAD_REQUEST");
  });

  it("ignores unknown options and providers with a warning, inherited property names included", () => {
    const request = parseImageRequest({
      prompt: "x",
      providerOptions: { "provider-a": { constructor: "x", quality: "low" }, "provider-b": { x: 1 } },
    });
    expect(request.providerOptions).toEqual({ "provider-a": { quality: "low" } });
    expect(request.warnings).toEqual([
      "providerOptions.provider-a.constructor is not supported and was ignored",
      "providerOptions.provider-b is not supported and was ignored",
    ]);
  });
});

describe("image request provider options, bounded", () => {
  const many = (count: number, prefix = "o") =>
    Object.fromEntries(Array.from({ length: count }, (_, index) => [`${prefix}${index}`, 0]));

  it("reports many unknown options in one warning naming the first three and the count", () => {
    const request = parseImageRequest({
      prompt: "x",
      providerOptions: { "provider-a": { ...many(99), quality: "low" }, "provider-c": many(2) },
    });
    expect(request.providerOptions).toEqual({ "provider-a": { quality: "low" }, "provider-c": {} });
    expect(request.warnings).toEqual([
      "providerOptions.provider-a.o0, providerOptions.provider-a.o1, providerOptions.provider-a.o2 and 96 more are not supported and were ignored",
      "providerOptions.provider-c.o0 and providerOptions.provider-c.o1 are not supported and were ignored",
    ]);
  });

  it("reports unknown providers in one warning, and cuts a long name", () => {
    const request = parseImageRequest({
      prompt: "x",
      providerOptions: { "provider-b": {}, openai: {}, ["x".repeat(10_000)]: {}, google: {} },
    });
    expect(request.warnings).toEqual([
      `providerOptions.provider-b, providerOptions.openai, providerOptions.${"x".repeat(64)}… and 1 more are not supported and were ignored`,
    ]);
  });

  it.each([
    ["providerOptions", () => many(101, "provider-")],
    ["providerOptions.provider-a", () => ({ "provider-a": many(101) })],
    ["providerOptions.provider-c", () => ({ "provider-c": many(5_000) })],
  ])("refuses more than 100 members in %s with 422 naming it", (option, options) => {
    const error = refusal(options());
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toMatch(/^`providerOptions[\w.-]*` has \d+ members; at most 100 are taken/);
    expect(error.details).toMatchObject({ option, max: 100 });
  });

  it("takes 100 members", () => {
    expect(parseImageRequest({ prompt: "x", providerOptions: many(100, "p") }).warnings).toHaveLength(1);
  });
});

describe("fitting an image request to its provider and model", () => {
  const parsed = (body: Record<string, unknown>) => parseImageRequest({ prompt: "x", ...body });
  function refusal(run: () => unknown): GatewayError {
    try {
      run();
    } catch (error) {
      if (error instanceof GatewayError) return error;
      throw error;
    }
    throw new Error("the request was accepted");
  }

  it("has rules for every catalogued image model of provider A and every Imagen model", () => {
    const imageModels = [...modelsFor("provider-a"), ...modelsFor("provider-c")]
      .filter((model) => model.capabilities.image)
      .map((model) => model.id);
    expect(imageModels).toContain("imagen-4.0-ultra-generate-001");
    expect(Object.keys(imageModelRules).sort()).toEqual(imageModels.sort());
  });

  it.each([
    [
      "gpt-image-1",
      { providerOptions: { "provider-a": { quality: "standard" } } },
      "providerOptions.provider-a.quality",
    ],
    [
      "gpt-image-1-mini",
      { providerOptions: { "provider-a": { quality: "hd" } } },
      "providerOptions.provider-a.quality",
    ],
    [
      "dall-e-3",
      { providerOptions: { "provider-a": { quality: "auto" } } },
      "providerOptions.provider-a.quality",
    ],
    ["gpt-image-1", { size: "1792x1024" }, "size"],
    ["gpt-image-1-mini-2025-10-06", { size: "256x256" }, "size"],
    ["imagen-4.0-generate-001", { aspectRatio: "3:2" }, "aspectRatio"],
    ["models/imagen-4.0-ultra-generate-001", { aspectRatio: "1:2" }, "aspectRatio"],
  ] as const)("refuses %s with %j: 422 naming %s and the model", (model, body, option) => {
    const provider = model.includes("imagen") ? "provider-c" : "provider-a";
    const error = refusal(() => fitImageRequest(provider, model, parsed(body)));
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toContain(`\`${option}\``);
    expect(error.message).toContain(model);
    expect(error.details).toEqual({ option, allowed: expect.arrayContaining([expect.any(String)]) });
  });

  it("drops style for gpt-image models with a warning and keeps it for dall-e-3", () => {
    const request = parsed({ providerOptions: { "provider-a": { style: "vivid", quality: "high" } } });
    const fitted = fitImageRequest("provider-a", "gpt-image-1", request);
    expect(fitted.providerOptions).toEqual({ "provider-a": { quality: "high" } });
    expect(fitted.warnings).toEqual([
      "providerOptions.provider-a.style is not supported by gpt-image-1 and was ignored",
    ]);
    expect(request.providerOptions).toEqual({ "provider-a": { style: "vivid", quality: "high" } });
    const dalle = fitImageRequest(
      "provider-a",
      "dall-e-3",
      parsed({ providerOptions: { "provider-a": { style: "vivid" } } }),
    );
    expect(dalle.providerOptions).toEqual({ "provider-a": { style: "vivid" } });
    expect(dalle.warnings).toEqual([]);
  });

  it("lets a model the catalogue does not know take what its provider allows", () => {
    const request = parsed({
      size: "512x512",
      providerOptions: { "provider-a": { quality: "hd", style: "vivid" } },
    });
    expect(fitImageRequest("provider-a", "gpt-image-9", request)).toEqual(request);
    expect(fitImageRequest("provider-c", "imagen-5.0-generate-001", parsed({ aspectRatio: "2:3" }))).toEqual(
      parsed({ aspectRatio: "2:3" }),
    );
  });

  it.each([
    ["provider-a", "gpt-4.1-mini", "provider-a"],
    ["provider-a", "text-embedding-3-small", "provider-a"],
    ["provider-c", "models/gemini-2.5-flash", "provider-c"],
    ["provider-a", "imagen-4.0-generate-001", "provider-c"],
    ["provider-c", "dall-e-3", "provider-a"],
  ] as const)(
    "refuses on %s the catalogued model %s, which is no image model of it: 422 naming it",
    (provider, model, modelProvider) => {
      const error = refusal(() => fitImageRequest(provider, model, parsed({})));
      expect(error.code).toBe("VALIDATION_ERROR");
      expect(error.message).toContain(JSON.stringify(model));
      expect(error.details).toEqual({ model, provider, modelProvider });
    },
  );

  it.each([
    [
      "provider-a",
      "gpt-4.1",
      "2026-11-30",
      "gpt-image-2.6-sunburst, gpt-image-2.6-flare, gpt-image-2, gpt-image-1-mini (until 2026-12-01)",
    ],
    ["provider-a", "gpt-4.1", "2026-12-01", "gpt-image-2.6-sunburst, gpt-image-2.6-flare, gpt-image-2"],
    [
      "provider-a",
      "gpt-4.1",
      "2026-05-11",
      "gpt-image-2.6-sunburst, gpt-image-2.6-flare, gpt-image-2, gpt-image-1 (until 2026-10-23), " +
        "dall-e-3 (until 2026-05-12), gpt-image-1-mini (until 2026-12-01)",
    ],
    [
      "provider-c",
      "gpt-image-1",
      "2026-11-30",
      "gemini-nano-banana-2.1, gemini-3.1-flash-lite-image, gemini-3-pro-image",
    ],
  ] as const)(
    "lists on %s, refusing %s on %s, the image models its provider still serves, those it will shut down after the others",
    (provider, model, day, listed) => {
      const error = refusal(() => fitImageRequest(provider, model, parsed({}), new Date(`${day}T12:00:00Z`)));
      expect(error.message).toMatch(
        new RegExp(`, whose image models are ${listed.replace(/[().]/g, "\\$&")}$`),
      );
    },
  );

  it.each([
    ["gpt-image-1", 32000],
    ["gpt-image-2.6-flare", 32000],
    ["dall-e-3", 4000],
  ] as const)(
    "refuses a prompt over %s's documented %i characters with 422 naming the limit",
    (model, max) => {
      expect(fitImageRequest("provider-a", model, parsed({ prompt: "a".repeat(max) })).prompt).toHaveLength(
        max,
      );
      const error = refusal(() =>
        fitImageRequest("provider-a", model, parsed({ prompt: "a".repeat(max + 1) })),
      );
      expect(error.code).toBe("VALIDATION_ERROR");
      expect(error.message).toBe(`\`prompt\` has ${max + 1} characters; model ${model} takes at most ${max}`);
      expect(error.details).toEqual({ option: "prompt", length: max + 1, max });
    },
  );

  it("counts a surrogate pair as one character and a lone surrogate as one too", () => {
    expect(
      fitImageRequest("provider-a", "dall-e-3", parsed({ prompt: "猫".repeat(4000) })).prompt,
    ).toHaveLength(4000);
    expect(
      refusal(() => fitImageRequest("provider-a", "dall-e-3", parsed({ prompt: "猫".repeat(4001) }))).details,
    ).toEqual({ option: "prompt", length: 4001, max: 4000 });
    const pairs = "\u{1F98A}".repeat(4000);
    expect(fitImageRequest("provider-a", "dall-e-3", parsed({ prompt: pairs })).prompt).toBe(pairs);
    // Unpaired halves (a JSON "\\ud83e") are one character each, as Python's len counts them.
    for (const lone of ["\ud83e".repeat(4001), "\ude0a\ud83dx".repeat(1334).slice(0, 4001)])
      expect(
        refusal(() => fitImageRequest("provider-a", "dall-e-3", parsed({ prompt: lone }))).details,
      ).toEqual({
        option: "prompt",
        length: 4001,
        max: 4000,
      });
  });

  it("leaves prompt limits in tokens to the provider: Imagen and the Gemini image models", () => {
    const prompt = "a".repeat(40000);
    for (const model of ["imagen-4.0-generate-001", "gemini-nano-banana-2.1"])
      expect(fitImageRequest("provider-c", model, parsed({ prompt })).prompt).toBe(prompt);
  });

  it("checks GPT Image 2's sizes by its documented rules, not those of the models it documents none for", () => {
    expect(
      refusal(() => fitImageRequest("provider-a", "gpt-image-2", parsed({ size: "1024x1000" }))).message,
    ).toBe(
      "`size` 1024x1000 does not fit model gpt-image-2: its width and height must both be multiples of 16",
    );
    expect(fitImageRequest("provider-a", "gpt-image-2", parsed({ size: "1024x1008" })).size).toBe(
      "1024x1008",
    );
    expect(fitImageRequest("provider-a", "gpt-image-2.6-sunburst", parsed({ size: "1024x1000" })).size).toBe(
      "1024x1000",
    );
  });

  it("bounds the sizes of dall-e-3 and the GPT Image 2.6 models, whose sizes it checks by no list or rule", () => {
    // dall-e-3: at most its largest documented size, 1792x1024 either way (SPEC's 1536x1024 too).
    for (const size of ["1024x1024", "1792x1024", "1024x1792", "1536x1024", "512x512"])
      expect(fitImageRequest("provider-a", "dall-e-3", parsed({ size })).size).toBe(size);
    const absurd = refusal(() => fitImageRequest("provider-a", "dall-e-3", parsed({ size: "99999x99999" })));
    expect(absurd.code).toBe("VALIDATION_ERROR");
    expect(absurd.message).toBe(
      "`size` 99999x99999 does not fit model dall-e-3: its longer side must be at most 1792 pixels",
    );
    expect(absurd.details).toEqual({ option: "size", maxSide: 1792, maxPixels: 1_835_008 });
    expect(
      refusal(() => fitImageRequest("provider-a", "dall-e-3", parsed({ size: "1792x1792" }))).message,
    ).toBe(
      "`size` 1792x1792 does not fit model dall-e-3: it must have at most 1,835,008 pixels, not 3,211,264",
    );
    // The GPT Image 2.6 models: at most the largest image a catalogued model makes (GPT Image 2's).
    for (const model of ["gpt-image-2.6-sunburst", "gpt-image-2.6-flare"]) {
      for (const size of ["3840x2160", "2160x3840", "2880x2880", "1024x1000", "256x256"])
        expect(fitImageRequest("provider-a", model, parsed({ size })).size).toBe(size);
      const error = refusal(() => fitImageRequest("provider-a", model, parsed({ size: "99999x99999" })));
      expect(error.message).toBe(
        `\`size\` 99999x99999 does not fit model ${model}: its longer side must be at most 3840 pixels`,
      );
      expect(error.details).toEqual({ option: "size", maxSide: 3840, maxPixels: 8_294_400 });
      expect(refusal(() => fitImageRequest("provider-a", model, parsed({ size: "2896x2896" }))).message).toBe(
        `\`size\` 2896x2896 does not fit model ${model}: it must have at most 8,294,400 pixels, not 8,386,816`,
      );
    }
    // A model the catalogue does not know (a new one, a self-hosted server's) takes any size.
    expect(fitImageRequest("provider-a", "gpt-image-9", parsed({ size: "99999x99999" })).size).toBe(
      "99999x99999",
    );
  });

  it("drops the other image provider's options with a warning", () => {
    const request = parsed({
      providerOptions: { "provider-a": { quality: "hd" }, "provider-c": { personGeneration: "allow_all" } },
    });
    const onC = fitImageRequest("provider-c", "imagen-4.0-generate-001", request);
    expect(onC.providerOptions).toEqual({ "provider-c": { personGeneration: "allow_all" } });
    expect(onC.warnings).toEqual([
      "providerOptions.provider-a is ignored: this project generates images with provider-c",
    ]);
    const onA = fitImageRequest("provider-a", "dall-e-3", request);
    expect(onA.providerOptions).toEqual({ "provider-a": { quality: "hd" } });
    expect(onA.warnings).toEqual([
      "providerOptions.provider-c is ignored: this project generates images with provider-a",
    ]);
  });
});

describe("image request model", () => {
  it.each([
    "imagen-4.0-generate-001:predict#",
    "../../../secret/admin",
    "imagen-4.0-generate-001:predict?key=abc&x=",
    "gpt-image-1%2F..",
    "a/b",
    "x".repeat(201),
  ])("refuses %j with 422: it would change the provider's URL", (model) => {
    let error: unknown;
    try {
      parseImageRequest({ prompt: "x", model });
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ code: "VALIDATION_ERROR" });
  });

  it.each([
    "gpt-image-1",
    "dall-e-3",
    "imagen-4.0-fast-generate-001",
    "models/imagen-4.0-generate-001",
    "my_custom.model-2",
  ])("takes the model name %j", (model) =>
    expect(parseImageRequest({ prompt: "x", model }).model).toBe(model),
  );
});

describe("image request field types and values", () => {
  const errorOf = (body: Record<string, unknown>) => {
    try {
      parseImageRequest({ prompt: "x", ...body });
    } catch (error) {
      if (error instanceof GatewayError) return { code: error.code, message: error.message };
      throw error;
    }
    throw new Error("the request was accepted");
  };

  it.each([
    [{ seed: 1.5 }, "`seed` must be a whole number"],
    [{ model: "" }, "`model` must be a model name"],
  ])("refuses the well-typed but malformed value %j with 422", (body, message) => {
    const error = errorOf(body);
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toContain(message);
  });

  it.each([[{ seed: "1" }], [{ model: 7 }]])("refuses the ill-typed field %j with 400", (body) => {
    expect(errorOf(body).code).toBe("BAD_REQUEST");
  });
});

describe("image request size and aspect ratio", () => {
  const message = (fields: Record<string, unknown>) => {
    try {
      parseImageRequest({ prompt: "x", ...fields });
    } catch (error) {
      if (error instanceof GatewayError) return `${error.code}: ${error.message}`;
      throw error;
    }
    return "accepted";
  };

  it.each([
    [
      { size: "1x1" },
      "VALIDATION_ERROR: `size` 1x1 is out of range: width and height are each from 10 to 99999 pixels",
    ],
    [
      { size: "100000x10" },
      "VALIDATION_ERROR: `size` 100000x10 is out of range: width and height are each from 10 to 99999 pixels",
    ],
    [
      { size: "0512x512" },
      "VALIDATION_ERROR: `size` 0512x512 is out of range: width and height are each from 10 to 99999 pixels",
    ],
    [{ size: "1024X1024" }, "VALIDATION_ERROR: `size` must have the form {width}x{height}, e.g. 1024x1024"],
    [{ size: "1024x" }, "VALIDATION_ERROR: `size` must have the form {width}x{height}, e.g. 1024x1024"],
    [
      { aspectRatio: "1000:1" },
      "VALIDATION_ERROR: `aspectRatio` 1000:1 is out of range: width and height are each from 1 to 999",
    ],
    [
      { aspectRatio: "0:1" },
      "VALIDATION_ERROR: `aspectRatio` 0:1 is out of range: width and height are each from 1 to 999",
    ],
    [
      { aspectRatio: "16x9" },
      "VALIDATION_ERROR: `aspectRatio` must have the form {width}:{height}, e.g. 16:9",
    ],
    [{ size: "10x99999" }, "accepted"],
    [{ aspectRatio: "999:1" }, "accepted"],
  ])("answers %j with %s", (fields, expected) => {
    expect(message(fields)).toBe(expected);
  });
});
