import { ConflictError, loadReleaseManifest } from '@gatehouse/contracts';
import {
  DependencyUnavailable,
  inTransaction,
  isConnectionFault,
  newestMigration,
  recordAudit,
  schemaProblems,
  type Db,
} from '@gatehouse/ledger';
import { releaseDigestProblems } from '@gatehouse/tools';
import type { ReadyCheck } from './http.ts';
import type { Logger } from './logger.ts';
import type { PostgresState } from './postgres-gate.ts';
import { within } from './timeout.ts';
import { bootStep } from './boot-step.ts';

/** How long one try of the boot's schema check waits for the database, ms. */
const SCHEMA_BOOT_CHECK_MS = 5000;

/** A service's code differs from its release manifest; it must not boot (ADR 0220). ConflictError `release_digest_mismatch`. */
export class ReleaseMismatch extends ConflictError {
  readonly problems: string[];
  constructor(service: string, release: string, problems: string[]) {
    super(
      'release_digest_mismatch',
      `${service} refuses to boot: its code differs from release ${release}:\n${problems.map((p) => `  ${p}`).join('\n')}`,
    );
    this.problems = problems;
  }
}

/**
 * Boot check of every service (docs/decisions/0220-monitors-before-damage.md): the tool catalog,
 * instructions and audit-schema digests this code computes must equal those of the release
 * manifest it serves (`GATEHOUSE_RELEASE`), and the database must hold every migration of this
 * code, the newest being the manifest's schema version (a database down or silent at boot is
 * waited for, ADR 0653; not when the digests already differ: that refusal needs no database). On a mismatch it logs `alert:
 * release_digest_mismatch`, records `service.boot_refused` in the audit outbox (best effort: the
 * audit service's monitor raises the alert from it; a database that does not answer within 5 s
 * is skipped) and throws, so the process exits before it serves a job.
 * @throws ReleaseMismatch listing every differing digest.
 * @throws Error when the manifest is missing or invalid.
 */
export async function assertReleaseMatchesCode(service: string, release: string, db: Db, log: Logger): Promise<void> {
  const manifest = loadReleaseManifest(release);
  const problems = releaseDigestProblems(manifest);
  // The schema the code needs: a database down or silent at boot is waited for (ADR 0653), so no
  // process serves before the check ran; a check that fails otherwise is skipped with a warning.
  const schema = problems.length
    ? []
    : await bootStep(log, 'check the database schema', async () => {
        try {
          return await within(schemaProblems(db, manifest.schemaVersion), SCHEMA_BOOT_CHECK_MS);
        } catch (err) {
          if (isConnectionFault(err) || (err as Error).message === `timed out after ${SCHEMA_BOOT_CHECK_MS} ms`)
            throw new DependencyUnavailable('postgres', `the schema check at boot: ${(err as Error).message}`, { cause: err });
          log.warn({ err: (err as Error).message }, 'could not check the database schema at boot');
          return [];
        }
      });
  problems.push(...schema);
  if (!problems.length) return;
  log.error({ alert: 'release_digest_mismatch', release, problems }, 'invariant monitor fired: release_digest_mismatch');
  const audit = inTransaction(db, (trx) =>
    recordAudit(trx, {
      type: 'service.boot_refused',
      service,
      runId: null,
      outcome: problems.map((p) => p.split(' ')[0]).join(','),
      revisions: { release },
    }),
  );
  await Promise.race([audit, new Promise((r) => setTimeout(r, 5000).unref())]).catch((err: unknown) =>
    log.warn({ err: (err as Error).message }, 'could not record the refused boot in the audit outbox'),
  );
  throw new ReleaseMismatch(service, release, problems);
}

/** How long `/readyz` reuses one answer of the schema check (ms): see {@link schemaReadyCheck}. */
export const SCHEMA_CHECK_TTL_MS = 5000;

/** Options of {@link schemaReadyCheck}; durations in milliseconds. */
export interface SchemaReadyCheckOptions {
  /** How long one answer is reused (default {@link SCHEMA_CHECK_TTL_MS}). */
  ttlMs?: number;
  /** How long the query may take before this probe counts it as unknown (default 1500: within the readiness timeout). */
  timeoutMs?: number;
  /** The Postgres gate's state: while it says down the query is not sent (the `postgres` check reports the outage). */
  postgres?: { readonly state: PostgresState };
}

/**
 * The `schema` readiness check: the database holds every migration of this code (the boot check
 * of {@link assertReleaseMatchesCode}, kept true while the service runs). A `gatehouse migrate
 * down` under running services makes their `/readyz` answer 503 naming the migration not applied
 * and `gatehouse migrate up`, instead of staying ready while statements fail on what it removed.
 *
 * Cheap by caching, not by a weaker signal: readiness is polled every few seconds by every
 * orchestrator and load balancer, so one answer of {@link schemaProblems} (one indexed read of
 * Kysely's small migration table) is reused for `ttlMs` (default 5 s), and concurrent probes share
 * the query in flight — at most one query per service process per 5 s, however often it is polled.
 * The cost is that a rollback shows up to `ttlMs` late; a probe period is already that coarse.
 * The applied migrations themselves are the signal (not, say, the release row), because a
 * `migrate down` changes nothing else.
 *
 * A database that does not answer (the gate says down, a connection fault, or no answer within
 * `timeoutMs`) leaves this check passing and nothing cached: the outage is the `postgres` check's
 * to report, once. Any other error (e.g. no migration table) fails the check with its message.
 */
export function schemaReadyCheck(db: Db, opts: SchemaReadyCheckOptions = {}): ReadyCheck {
  const ttlMs = opts.ttlMs ?? SCHEMA_CHECK_TTL_MS;
  const timeoutMs = opts.timeoutMs ?? 1500;
  const newest = newestMigration();
  let cached: { at: number; problems: string[] } | undefined;
  let inFlight: Promise<void> | undefined;
  const refresh = async (): Promise<void> => {
    cached = undefined;
    let timer: NodeJS.Timeout | undefined;
    const unanswered = new Promise<'unanswered'>((res) => (timer = setTimeout(() => res('unanswered'), timeoutMs)));
    try {
      const problems = await Promise.race([schemaProblems(db, newest), unanswered]);
      if (problems !== 'unanswered') cached = { at: Date.now(), problems };
    } catch (err) {
      if (!isConnectionFault(err)) throw err;
    } finally {
      clearTimeout(timer);
    }
  };
  return async () => {
    if (opts.postgres && !opts.postgres.state.up) return;
    if (!cached || Date.now() - cached.at >= ttlMs) {
      inFlight ??= refresh().finally(() => (inFlight = undefined));
      await inFlight;
    }
    if (cached?.problems.length) throw new Error(`database schema is not this code's: ${cached.problems.join('; ')}`);
  };
}
