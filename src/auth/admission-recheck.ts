import { projectNotFound } from "../admin/project-id.js";
import { GatewayError } from "../errors.js";
import { type AuthRequest, type AuthResult, unauthorized } from "./authenticate.js";
import type { CredentialDirectory } from "./credential-directory.js";
import { bearerValue, single, splitBearer, testKeyHeader } from "./credential-headers.js";
import { testKeyMatches } from "./test-key.js";

type AuthSuccess = Extract<AuthResult, { ok: true }>;

export interface AdmissionRecheckDeps {
  directory: CredentialDirectory;
  /** False in production, where no test key authenticates (as for `createAuthenticator`). */
  testModeAllowed: boolean;
}

/**
 * A call is authenticated once its head is in; its body may take minutes more to arrive (Node's
 * `requestTimeout`, 300 s), and a revocation, a deletion or a project disabled meanwhile must still
 * keep it from the provider: the admin's 204 says the key stopped working at once on this instance
 * (docs/api.md). `since` answers, for a success (which holds the directory's generation and the
 * records' read time it was worked out from), the check to run once the body is in. That check costs
 * nothing while no admin change was made on this instance since and the records the success was
 * worked out from are still within their TTL (so a change made elsewhere shows as it would for a new
 * request); otherwise it reads them again, as a new request would, and throws the refusal a new
 * request with the same credentials would get (404, 403 or 401). Apple is not asked again: a
 * device token passed, and its use was counted, when the call was admitted.
 */
export function createAdmissionRecheck(deps: AdmissionRecheckDeps) {
  const { directory } = deps;
  return {
    /**
     * `result`'s generation and read time are authentication's (`AuthResult`): read before the
     * records it checked, never later than them, though a reload may have answered since (one that
     * found the key revoked, say), and nothing to read again at admission.
     */
    since(result: AuthSuccess, request: AuthRequest): () => Promise<void> | undefined {
      const { generation, readAt } = result;
      return () => {
        if (directory.generation() === generation && directory.now() - readAt < directory.ttlMs)
          return undefined;
        return refusalNow(result, request).then((refusal) => {
          if (refusal !== null) throw refusal;
        });
      };
    },
  };

  /** What a new request with the same credentials would be refused with now; null: it would pass. */
  async function refusalNow(result: AuthSuccess, request: AuthRequest): Promise<GatewayError | null> {
    const id = result.project.id;
    const project = await directory.project(id);
    if (project === null) return projectNotFound(id);
    // A project created again under the id is another project, which knows none of the credentials
    // the call was admitted with (its keys and test keys went with the first): 401, as a new request.
    if (project.createdAt !== result.project.createdAt)
      return unauthorized("the partial key is not valid for this project");
    // In authentication's order: the call's own credential (its test key, or DeviceCheck) and its
    // partial key's record first, 401; only for credentials that still pass, the key revoked or the
    // project disabled (403), which a caller whose credentials no longer pass is not told.
    const testMethod = result.method === "test-key-header" || result.method === "bearer-test-key";
    if (testMethod) {
      if (!project.testMode || !deps.testModeAllowed)
        return unauthorized("test mode is off for this project");
      const candidate =
        result.method === "test-key-header"
          ? single(request.headers[testKeyHeader])
          : splitBearer(bearerValue(request.headers, request.sdkKeyHeader) ?? "").token;
      if (!candidate || !testKeyMatches(candidate, await directory.testKeyDigests(id)))
        return unauthorized("the test key does not match");
    } else if (!project.deviceCheck.enabled) return unauthorized("device check is off for this project");
    const key = await directory.key(result.keyId);
    if (key === null || key.record.projectId !== id || key.record.provider !== result.provider)
      return unauthorized("the partial key is not valid for this project");
    // Its token was verified under the settings before: a new request's would be asked of Apple again.
    if (!testMethod && project.deviceCheck.changedAt !== result.project.deviceCheck.changedAt)
      return unauthorized("the project's DeviceCheck settings changed; retry");
    if (key.record.revokedAt !== null) return new GatewayError("FORBIDDEN", "This provider key was revoked");
    if (project.disabled) return new GatewayError("FORBIDDEN", "This project is disabled");
    return null;
  }
}

export type AdmissionRecheck = ReturnType<typeof createAdmissionRecheck>;
