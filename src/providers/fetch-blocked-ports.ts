import type { Config } from "../config.js";
import type { StartWarning } from "../production-warnings.js";

/**
 * The ports fetch refuses to call (WHATWG Fetch, "bad port"), which undici's fetch, and so the AI
 * SDK calls of the structured and image endpoints, enforce. The proxies call through undici's
 * dispatcher, which does not; the PDF fetcher (undici's `request`) refuses them itself.
 */
const blockedPorts = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104,
  109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515,
  526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049,
  3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

/** Whether fetch refuses to call `port` (a WHATWG "bad port": SMTP, IRC, LDAPS…). */
export function isFetchBlockedPort(port: number): boolean {
  return blockedPorts.has(port);
}

const settings = {
  SLUICE_PROVIDER_A_BASE_URL: "providerABaseUrl",
  SLUICE_PROVIDER_B_BASE_URL: "providerBBaseUrl",
  SLUICE_PROVIDER_C_BASE_URL: "providerCBaseUrl",
} as const;

/**
 * A warning for each provider base URL on a port fetch refuses: the proxies reach it, but every
 * `/v1/text`, `/v1/vision`, `/v1/pdf` and `/v1/image` call would fail as "could not be reached".
 */
export function fetchBlockedPortWarnings(
  config: Pick<Config, (typeof settings)[keyof typeof settings]>,
): StartWarning[] {
  return Object.entries(settings).flatMap(([setting, field]) => {
    const port = Number(new URL(config[field]).port);
    if (!blockedPorts.has(port)) return [];
    return [
      {
        fields: { setting, port },
        message: `${setting} uses port ${port}, which fetch refuses to call (a WHATWG "bad port"): the proxies reach it, but /v1/text, /v1/vision, /v1/pdf and /v1/image cannot; use another port`,
      },
    ];
  });
}
