import type { FuzzSecrets, RouteKind } from "./fuzz-inputs.js";
import { pdfMinimal, png1x1 } from "./fuzz-values.js";

/** The output schema an admin create sends (a valid one). */
const outputSchema = { type: "object", properties: { a: { type: "string" } }, required: ["a"] };

export interface RouteTemplate {
  kind: RouteKind;
  methods: string[];
  path: (s: FuzzSecrets) => string;
  /** A valid body for the route's main method (undefined: the route takes none). */
  body?: (s: FuzzSecrets) => unknown;
  auth: "app-a" | "app-b" | "app-c" | "admin" | "none";
  /**
   * How the route reads a body, for the cases whose answer is known: `bounded` (structured and image
   * routes: UTF-8 JSON, bounded shape), `admin` (UTF-8 JSON, unknown fields refused), `json-proxy`
   * (forwarded, JSON content type required), `proxy` (forwarded as sent).
   */
  reads?: "bounded" | "admin" | "json-proxy" | "proxy";
  /** The structured and image routes' one required field. */
  field?: "text" | "image" | "pdf" | "prompt";
}

/** Every route of the gateway, each with what test/e2e/fuzz-bad-inputs.test.ts sends it when valid. */
export const routes: RouteTemplate[] = [
  { kind: "health", methods: ["GET", "HEAD"], path: () => "/health", auth: "none" },
  { kind: "metrics", methods: ["GET", "HEAD"], path: () => "/metrics", auth: "none" },
  ...(["provider-a", "provider-b", "provider-c"] as const).flatMap((provider): RouteTemplate[] => [
    { kind: "models", methods: ["GET"], path: () => `/v1/${provider}/models`, auth: "none" },
    { kind: "models", methods: ["GET"], path: (s) => `/v1/${provider}/${s.projectId}/models`, auth: "none" },
  ]),
  { kind: "models", methods: ["GET"], path: (s) => `/v1/provider-b/${s.projectId}/v1/models`, auth: "none" },
  {
    kind: "models",
    methods: ["GET"],
    path: (s) => `/v1/provider-b/${s.projectId}/v1/models/claude-sonnet-4-5`,
    auth: "none",
  },
  {
    kind: "models",
    methods: ["GET"],
    path: (s) => `/v1/provider-c/${s.projectId}/v1beta/models`,
    auth: "none",
  },
  {
    kind: "models",
    methods: ["GET"],
    path: (s) => `/v1/provider-c/${s.projectId}/v1beta/models/gemini-2.5-flash`,
    auth: "none",
  },
  ...(["text", "vision", "pdf"] as const).flatMap((kind): RouteTemplate[] => {
    const fieldOf = { text: "text", vision: "image", pdf: "pdf" } as const;
    const body = () =>
      kind === "text"
        ? { text: "Hello" }
        : kind === "vision"
          ? { image: `data:image/png;base64,${png1x1}` }
          : { pdf: `data:application/pdf;base64,${pdfMinimal}` };
    return [
      {
        kind: "structured",
        methods: ["POST"],
        path: () => `/v1/${kind}`,
        body,
        auth: "app-a",
        reads: "bounded",
        field: fieldOf[kind],
      },
      {
        kind: "structured",
        methods: ["POST"],
        path: (s) => `/v1/${kind}/${s.projectId}`,
        body,
        auth: "app-a",
        reads: "bounded",
        field: fieldOf[kind],
      },
    ];
  }),
  ...[(_: FuzzSecrets) => "/v1/image", (s: FuzzSecrets) => `/v1/image/${s.projectId}`].map(
    (path): RouteTemplate => ({
      kind: "image",
      methods: ["POST"],
      path,
      body: () => ({
        prompt: "a lighthouse",
        size: "1024x1024",
        n: 1,
        seed: 7,
        providerOptions: { "provider-a": { quality: "low", style: "vivid" } },
      }),
      auth: "app-a",
      reads: "bounded",
      field: "prompt",
    }),
  ),
  {
    kind: "proxy",
    methods: ["POST"],
    path: (s) => `/v1/provider-a/${s.projectId}/chat/completions`,
    body: () => ({ model: "gpt-4.1-mini", messages: [{ role: "user", content: "Hi" }] }),
    auth: "app-a",
    reads: "proxy",
  },
  {
    kind: "proxy",
    methods: ["POST"],
    path: (s) => `/v1/provider-a/${s.projectId}/embeddings`,
    body: () => ({ model: "text-embedding-3-small", input: "Hi" }),
    auth: "app-a",
    reads: "proxy",
  },
  {
    kind: "proxy",
    methods: ["GET", "DELETE"],
    path: (s) => `/v1/provider-a/${s.projectId}/files`,
    auth: "app-a",
  },
  {
    kind: "proxy",
    methods: ["POST"],
    path: (s) => `/v1/provider-b/${s.projectId}/v1/messages`,
    body: () => ({ model: "claude-sonnet-4-5", max_tokens: 16, messages: [{ role: "user", content: "Hi" }] }),
    auth: "app-b",
    reads: "json-proxy",
  },
  {
    kind: "proxy",
    methods: ["POST"],
    path: (s) => `/v1/provider-c/${s.projectId}/v1beta/models/gemini-2.5-flash:generateContent`,
    body: () => ({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }),
    auth: "app-c",
    reads: "json-proxy",
  },
  {
    kind: "admin",
    methods: ["POST"],
    path: () => "/admin/v1/projects",
    body: () => ({
      name: "Fuzzed",
      provider: "provider-a",
      testMode: true,
      outputSchema,
      rateLimits: { perMinute: 100, devicePerMinute: 10 },
      monthlySpendCapUsd: 5,
      proxyAllowList: { "provider-a": ["POST chat/completions"] },
    }),
    auth: "admin",
    reads: "admin",
  },
  { kind: "admin", methods: ["GET"], path: () => "/admin/v1/projects", auth: "admin" },
  {
    kind: "admin",
    methods: ["GET", "PATCH", "DELETE"],
    path: (s) => `/admin/v1/projects/${s.adminProjectId}`,
    body: () => ({ name: "Renamed", testMode: false, model: "gpt-4.1-mini", saveImagesToVault: false }),
    auth: "admin",
    reads: "admin",
  },
  {
    kind: "admin",
    methods: ["GET", "POST"],
    path: (s) => `/admin/v1/projects/${s.adminProjectId}/test-keys`,
    auth: "admin",
    reads: "admin",
  },
  {
    kind: "admin",
    methods: ["DELETE"],
    path: (s) => `/admin/v1/projects/${s.adminProjectId}/test-keys/tk_0000`,
    auth: "admin",
    reads: "admin",
  },
  {
    kind: "admin",
    methods: ["GET", "POST"],
    path: (s) => `/admin/v1/projects/${s.adminProjectId}/keys`,
    body: () => ({ provider: "provider-a", apiKey: "sk-fuzz-0123456789", label: "fuzz" }),
    auth: "admin",
    reads: "admin",
  },
  {
    kind: "admin",
    methods: ["DELETE"],
    path: (s) => `/admin/v1/projects/${s.adminProjectId}/keys/${s.keyIdA}`,
    auth: "admin",
    reads: "admin",
  },
  {
    kind: "admin",
    methods: ["GET"],
    path: (s) => `/admin/v1/projects/${s.adminProjectId}/usage?from=2026-01-01&to=2026-02-01&groupBy=model`,
    auth: "admin",
    reads: "admin",
  },
  {
    kind: "vault",
    methods: ["GET"],
    path: () => "/v1/vault/team/generated-images/p/2026/01/01/x.png",
    auth: "none",
  },
];
