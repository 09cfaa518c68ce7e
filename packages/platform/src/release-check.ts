import { ConflictError, loadReleaseManifest } from '@gatehouse/contracts';
import { inTransaction, recordAudit, schemaProblems, type Db } from '@gatehouse/ledger';
import { releaseDigestProblems } from '@gatehouse/tools';
import type { Logger } from './logger.ts';
import { within } from './timeout.ts';

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
 * code, the newest being the manifest's schema version (skipped when the database does not
 * answer within 5 s). On a mismatch it logs `alert:
 * release_digest_mismatch`, records `service.boot_refused` in the audit outbox (best effort: the
 * audit service's monitor raises the alert from it; a database that does not answer within 5 s
 * is skipped) and throws, so the process exits before it serves a job.
 * @throws ReleaseMismatch listing every differing digest.
 * @throws Error when the manifest is missing or invalid.
 */
export async function assertReleaseMatchesCode(service: string, release: string, db: Db, log: Logger): Promise<void> {
  const manifest = loadReleaseManifest(release);
  const problems = releaseDigestProblems(manifest);
  // The schema the code needs, when the database answers in time (an outage is the Postgres gate's).
  const schema = await within(schemaProblems(db, manifest.schemaVersion), 5000).catch((err: unknown) => {
    log.warn({ err: (err as Error).message }, 'could not check the database schema at boot');
    return [];
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
