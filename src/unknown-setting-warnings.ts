import type { UnknownSetting } from "./config.js";
import type { StartWarning } from "./production-warnings.js";

/**
 * The most names warned of one line each; past them, one line counts the rest. The environment is
 * the operator's, but what it holds need not be Sluice's: 10,000 `SLUICE_` names of a harness or a
 * platform logged 10,000 lines before the start listened.
 */
export const unknownSettingsNamed = 20;

/** The characters of a name a warning shows; a longer one (no setting's is) by its start and length. */
const shownNameCharacters = 64;

function shownName(name: string): string {
  return name.length <= shownNameCharacters
    ? name
    : `${name.slice(0, shownNameCharacters)}… (${name.length} characters)`;
}

/**
 * One start warning per name that looks like a setting but is none (config.ts's unknownSettings),
 * with the setting it is nearest to: the name alone, never its value (a misspelt token or key).
 * At most `unknownSettingsNamed` are named, those near a setting first (the likely misspellings,
 * which a long list of a harness's names sorted before them would hide), then in the order given;
 * one more line counts the others (`settingsNotNamed`). A name longer than any setting is shown by
 * its first 64 characters and its length (decision 0032).
 */
export function unknownSettingWarnings(unknown: readonly UnknownSetting[]): StartWarning[] {
  const nearFirst = [
    ...unknown.filter(({ nearest }) => nearest !== undefined),
    ...unknown.filter(({ nearest }) => nearest === undefined),
  ];
  const warnings: StartWarning[] = nearFirst.slice(0, unknownSettingsNamed).map(({ name, nearest }) => {
    const setting = shownName(name);
    return {
      fields: nearest === undefined ? { setting } : { setting, nearest },
      message: `${setting} is set, but Sluice has no such setting, so it is ignored${nearest === undefined ? "" : `: did you mean ${nearest}?`} (the settings: README, Configuration)`,
    };
  });
  const notNamed = nearFirst.length - warnings.length;
  if (notNamed > 0)
    warnings.push({
      fields: { settingsNotNamed: notNamed },
      message: `${notNamed} more SLUICE_ names are set that are no setting, so they are ignored: not named one by one, the first ${unknownSettingsNamed} are (those nearest a setting first; the settings: README, Configuration)`,
    });
  return warnings;
}
