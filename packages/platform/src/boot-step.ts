import type { Logger } from './logger.ts';
import { unavailableDependency } from './outage-hold.ts';

/** First and longest pause between two tries of a boot step whose dependency is down, ms. */
export const BOOT_RETRY_FIRST_MS = 500;
export const BOOT_RETRY_CAP_MS = 5_000;

/**
 * Runs one step of a service's start-up that needs a dependency (registering its release,
 * resealing webhook secrets) until it succeeds. While it fails because the dependency is down
 * ({@link unavailableDependency}: a Postgres connection fault or a `DependencyUnavailable`), it is
 * tried again after a pause doubling from 500 ms to 5 s, with one warn line when the wait starts
 * and one info line when it ends — so a process started during an outage waits for it instead of
 * exiting, and an orchestrator's restart back-off never stands between the dependency's return
 * and the service. Any other error is thrown at once (a refused boot, as before). `sleep` is
 * injectable for tests.
 * @returns what `step` returns.
 * @throws what `step` throws when it is not an outage.
 */
export async function bootStep<T>(
  log: Logger,
  what: string,
  step: () => Promise<T>,
  sleep: (ms: number) => Promise<void> = (ms) => new Promise((done) => setTimeout(done, ms)),
): Promise<T> {
  let pauseMs = BOOT_RETRY_FIRST_MS;
  let waitingSince: number | undefined;
  for (;;) {
    try {
      const result = await step();
      if (waitingSince !== undefined) log.info({ step: what, waitedMs: Date.now() - waitingSince }, 'boot step done after the outage');
      return result;
    } catch (err) {
      const dependency = unavailableDependency(err);
      if (!dependency) throw err;
      if (waitingSince === undefined) {
        waitingSince = Date.now();
        log.warn({ step: what, dependency, err: (err as Error).message }, 'boot step waits for a dependency');
      }
      await sleep(pauseMs);
      pauseMs = Math.min(pauseMs * 2, BOOT_RETRY_CAP_MS);
    }
  }
}
