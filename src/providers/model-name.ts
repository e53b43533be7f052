/**
 * The one rule for a model name Sluice sends a provider (docs/images.md, docs/api.md): letters,
 * digits, `.`, `_` and `-`, starting with a letter or digit, optionally after `models/`, at most
 * 200 characters after it. The name becomes part of a provider's URL (provider C:
 * `models/{model}:generateContent`): a `/`, `?`, `#`, `:` or `%` in it would reach another path,
 * add a query or cut the URL short. /v1/image, the admin input (API, CLI, SLUICE_CONFIG_FILE) and
 * the AI SDK model builder all apply it.
 */
const modelNamePattern = /^(?:models\/)?[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

export const modelNameRule =
  "must be a model name: letters, digits, `.`, `_` and `-` (optionally after `models/`), at most 200 characters";

export function isModelName(name: string): boolean {
  return modelNamePattern.test(name);
}
