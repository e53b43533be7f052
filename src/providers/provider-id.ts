/** The three upstream providers, by the path segment SPEC.md gives them. */
export const providerIds = ["provider-a", "provider-b", "provider-c"] as const;
export type ProviderId = (typeof providerIds)[number];

export function isProviderId(value: unknown): value is ProviderId {
  return typeof value === "string" && (providerIds as readonly string[]).includes(value);
}
