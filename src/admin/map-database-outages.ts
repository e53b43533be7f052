import { databaseUnavailable, isDatabaseUnavailable } from "../storage/database-unavailable.js";

type UseCases = Record<string, (...args: never[]) => Promise<unknown>>;

/**
 * The same use cases, each answering SERVICE_UNAVAILABLE with Retry-After (what authentication
 * answers) when the database is down, for the admin API and the CLI alike. Every other failure
 * (a missing project, bad input, a constraint violation, a bug) passes through unchanged.
 */
export function mapDatabaseOutages<T extends UseCases>(useCases: T): T {
  const mapped: UseCases = {};
  for (const [name, useCase] of Object.entries(useCases)) {
    mapped[name] = (...args) =>
      useCase(...args).catch((error: unknown) => {
        throw isDatabaseUnavailable(error) ? databaseUnavailable(error) : error;
      });
  }
  return mapped as T;
}
