import { type HealthCheck, pingAnswers } from "../http/public-routes.js";

export interface DownCheckFollowUp {
  /** What a `/health` check found of the check `name`: down starts the follow-up, up ends it. */
  heard(name: string, ok: boolean): void;
  /** Ends every follow-up (the gateway closes: its connections are about to go). */
  stop(): void;
}

/**
 * What `/health` finds sets the `sluice_degraded` gauge (its "health" source), so that a quiet
 * instance learns of an outage too. A ping that failed then held the gauge at 1 until the next
 * `/health`, however long after the component came back (an instance probed rarely, or not at all
 * once its load balancer took it out). So a check found down is pinged again every `intervalMs` by
 * Sluice itself until it answers, and `report` hears each answer: the gauge returns to 0 within
 * `intervalMs` of the component's return. One follow-up per check at a time; its timer does not
 * keep the process alive.
 */
export function createDownCheckFollowUp(
  checks: readonly HealthCheck[],
  report: (name: string, ok: boolean) => void,
  intervalMs = 5000,
): DownCheckFollowUp {
  // The follow-up of each check: its timer, kept until its ping answered. One ended meanwhile (a
  // `/health` found the check up, or the gateway closes) is no longer the map's, and its answer is
  // not reported: it would be older than what ended it.
  const pending = new Map<string, { timer: NodeJS.Timeout }>();
  let stopped = false;

  const follow = (check: HealthCheck) => {
    if (stopped || pending.has(check.name)) return;
    const entry = {
      timer: setTimeout(async () => {
        const ok = await pingAnswers(check);
        if (pending.get(check.name) !== entry) return;
        pending.delete(check.name);
        report(check.name, ok);
        if (!ok) follow(check);
      }, intervalMs),
    };
    entry.timer.unref();
    pending.set(check.name, entry);
  };

  const end = (name: string) => {
    clearTimeout(pending.get(name)?.timer);
    pending.delete(name);
  };

  return {
    heard(name, ok) {
      report(name, ok);
      const check = checks.find((candidate) => candidate.name === name);
      if (check === undefined) return;
      if (ok) end(name);
      else follow(check);
    },
    stop() {
      stopped = true;
      for (const name of [...pending.keys()]) end(name);
    },
  };
}
