import type { UnknownSetting } from "./config.js";
import type { StartWarning } from "./production-warnings.js";

/**
 * One start warning per name that looks like a setting but is none (config.ts's unknownSettings),
 * with the setting it is nearest to: the name alone, never its value (a misspelt token or key).
 */
export function unknownSettingWarnings(unknown: readonly UnknownSetting[]): StartWarning[] {
  return unknown.map(({ name, nearest }) => ({
    fields: nearest === undefined ? { setting: name } : { setting: name, nearest },
    message: `${name} is set, but Sluice has no such setting, so it is ignored${nearest === undefined ? "" : `: did you mean ${nearest}?`} (the settings: README, Configuration)`,
  }));
}
