import { randomUUID } from 'node:crypto';
import { canonicalJson, Refused, sha256Hex } from '@gatehouse/contracts';
import { actorHash, inTransaction, recordAudit, type Db, type Trx } from '@gatehouse/ledger';

/**
 * What a two-person override lets a release command go past (docs/decisions/0210-canary-analysis.md,
 * docs/decisions/0230-two-person-release-changes.md): a failing canary analysis, a failing
 * boundary-case gate (`--force`), or a bundle that raises a limit of the active one.
 */
export type OverrideKind = 'canary' | 'force_gate' | 'raise_limits';

/** How long an override stays usable after it is asked for (ms): like an action approval, 15 minutes. */
export const OVERRIDE_TTL_MS = 15 * 60_000;

/** sha256 over the kind, the release and what is overridden (sorted): what an override is bound to. */
export function overrideDigest(kind: OverrideKind, release: string, items: readonly string[]): string {
  return sha256Hex(canonicalJson({ kind, release, items: [...items].sort() }));
}

/** An override to ask for: bound to `digest`; `summary` goes into the audit event. */
export interface OverrideRequest {
  release: string;
  kind: OverrideKind;
  digest: string;
  summary: string;
  reason: string;
  operator: string;
  hmacKey: string;
}

/**
 * Records a pending override (`release.override_requested`), expiring after {@link OVERRIDE_TTL_MS}.
 * @returns its id, for the second operator's `release override --approve <id>`.
 * @throws Error when the reason is empty or longer than 500 characters.
 */
export async function requestOverride(db: Db, r: OverrideRequest): Promise<string> {
  const reason = r.reason.trim();
  if (!reason || reason.length > 500) throw new Error('release override needs --reason "<why>" (1–500 characters)');
  const id = randomUUID();
  await inTransaction(db, async (trx) => {
    await trx
      .insertInto('release_overrides')
      .values({
        id,
        release_id: r.release,
        kind: r.kind,
        failure_digest: r.digest,
        reason,
        requested_by: r.operator,
        expires_at: new Date(Date.now() + OVERRIDE_TTL_MS),
        approved_by: null,
        decided_at: null,
        used_at: null,
      })
      .execute();
    await recordAudit(trx, {
      type: 'release.override_requested',
      service: 'cli',
      runId: null,
      actorHash: actorHash(r.hmacKey, r.operator),
      outcome: `${r.summary};override:${id}`,
      revisions: { release: r.release },
    });
  });
  return id;
}

/** Why {@link approveOverride} refused. */
export class OverrideRefused extends Refused {
  declare readonly reason: 'not_found' | 'requester_cannot_approve' | 'expired' | 'already_decided';
  constructor(reason: OverrideRefused['reason'], id: string) {
    super(reason, `override ${id} refused (${reason})`);
  }
}

/**
 * `gatehouse release override --approve <override-id>`: a second operator — never the one who
 * asked — approves a pending, unexpired override, in one conditional UPDATE. Audited.
 * @returns the release the override belongs to.
 * @throws OverrideRefused with its reason; nothing changes.
 */
export async function approveOverride(db: Db, id: string, opts: { operator: string; hmacKey: string }): Promise<string> {
  return inTransaction(db, async (trx) => {
    const row = await trx
      .updateTable('release_overrides')
      .set({ status: 'approved', approved_by: opts.operator, decided_at: new Date() })
      .where('id', '=', id)
      .where('status', '=', 'pending')
      .where('requested_by', '!=', opts.operator)
      .where('expires_at', '>', new Date())
      .returning(['release_id', 'kind'])
      .executeTakeFirst();
    if (!row) {
      const o = await trx.selectFrom('release_overrides').selectAll().where('id', '=', id).executeTakeFirst();
      const why = !o
        ? 'not_found'
        : o.requested_by === opts.operator
          ? 'requester_cannot_approve'
          : o.status !== 'pending'
            ? 'already_decided'
            : 'expired';
      throw new OverrideRefused(why, id);
    }
    await recordAudit(trx, {
      type: 'release.override_approved',
      service: 'cli',
      runId: null,
      actorHash: actorHash(opts.hmacKey, opts.operator),
      outcome: `${row.kind};override:${id}`,
      revisions: { release: row.release_id },
    });
    return row.release_id;
  });
}

/**
 * Consumes, in `trx`, one approved and unexpired override of `kind` for `release` bound to
 * `digest` — the oldest, locked (`SKIP LOCKED`) so two commands cannot both use it — and audits
 * it (`release.override_used`).
 * @returns its id, or null when there is none (the caller refuses).
 */
export async function consumeOverride(trx: Trx, r: Omit<OverrideRequest, 'reason'>): Promise<string | null> {
  const used = await trx
    .updateTable('release_overrides')
    .set({ status: 'used', used_at: new Date() })
    .where('id', '=', (eb) =>
      eb
        .selectFrom('release_overrides')
        .select('id')
        .where('release_id', '=', r.release)
        .where('kind', '=', r.kind)
        .where('status', '=', 'approved')
        .where('failure_digest', '=', r.digest)
        .where('expires_at', '>', new Date())
        .orderBy('created_at')
        .limit(1)
        .forUpdate()
        .skipLocked(),
    )
    .returning('id')
    .executeTakeFirst();
  if (!used) return null;
  await recordAudit(trx, {
    type: 'release.override_used',
    service: 'cli',
    runId: null,
    actorHash: actorHash(r.hmacKey, r.operator),
    outcome: `override:${used.id};${r.summary}`,
    revisions: { release: r.release },
  });
  return used.id;
}
