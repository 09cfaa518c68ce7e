import { sql, type RawBuilder } from 'kysely';
import type { Db, Trx } from './db.ts';
import type { WorkflowState } from './schema.ts';
import { LIVE_STATES } from './transitions.ts';

/** Advisory lock serializing release registration and activation. */
const RELEASES_LOCK = 0x72_65_6c_73; // "rels"

/**
 * Registers the release a service process runs (at boot): the first release ever seen becomes
 * `active` with writes enabled; any later unknown release is a `candidate` with consequential
 * writes disabled and no cohort (it serves nobody until `gatehouse release activate`). Known
 * releases are left as they are. The first one's `first_active_at` is set (ADR 0660: a rollback
 * may restore it). Returns the release's status.
 */
export async function registerRelease(db: Db, id: string, manifest: Record<string, unknown>): Promise<string> {
  return db.transaction().execute(async (trx) => {
    await sql`SELECT pg_advisory_xact_lock(${RELEASES_LOCK})`.execute(trx);
    const known = await trx.selectFrom('releases').select('status').where('id', '=', id).executeTakeFirst();
    if (known) return known.status;
    const active = await trx.selectFrom('releases').select('id').where('status', '=', 'active').executeTakeFirst();
    const status = active ? 'candidate' : 'active';
    await trx
      .insertInto('releases')
      .values({
        id,
        manifest: JSON.stringify(manifest),
        status,
        writes_enabled: !active,
        cohort: null,
        activated_at: active ? null : new Date(),
        first_active_at: active ? null : new Date(),
      })
      .execute();
    return status;
  });
}

/** Takes the release lock in `trx` (activation, rollback). */
export async function lockReleases(trx: Trx): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(${RELEASES_LOCK})`.execute(trx);
}

/**
 * Whether consequential writes are enabled for workflows of `releaseId` (docs/product/releases.md: a candidate
 * starts with writes disabled). A release without a row (never registered) is treated as enabled
 * only when no release is registered at all (a bare database in unit tests); otherwise disabled.
 */
export async function releaseWritesEnabled(db: Db | Trx, releaseId: string): Promise<boolean> {
  const row = await db.selectNoFrom(writesEnabledSql(sql`${releaseId}`).as('ok')).executeTakeFirstOrThrow();
  return row.ok;
}

/**
 * The rule of {@link releaseWritesEnabled} as a SQL boolean over a release id expression, so a
 * statement that locks or reads something else can carry it (one owner of the rule).
 */
export function writesEnabledSql(releaseId: RawBuilder<unknown>): RawBuilder<boolean> {
  return sql<boolean>`coalesce((select r.writes_enabled from releases r where r.id = ${releaseId}), not exists (select 1 from releases))`;
}

/**
 * The release a new workflow of `user` runs on: a candidate whose cohort names the user or
 * their tenant and that on-call is not draining, else the active release, else `fallback`
 * (nothing registered yet). A drained or quarantined candidate takes no new work: its cohort's
 * tickets run on the active release until `queues resume` (docs/decisions/0712-a-drained-candidate-takes-no-new-tickets.md).
 */
export async function routeRelease(db: Db | Trx, user: { id: string; tenant: string }, fallback: string): Promise<string> {
  const rows = await db
    .selectFrom('releases')
    .select(['id', 'status', 'cohort', 'draining'])
    .where('status', 'in', ['active', 'candidate'])
    .execute();
  const candidate = rows.find((r) => {
    const c = r.cohort as { tenants?: string[]; users?: string[] } | null;
    return r.status === 'candidate' && !r.draining && c && (c.users?.includes(user.id) || c.tenants?.includes(user.tenant));
  });
  return candidate?.id ?? rows.find((r) => r.status === 'active')?.id ?? fallback;
}

/**
 * Whether release `id` was activated with `--force` past its boundary-case gate (and not since
 * restored). Fails closed: when the ledger cannot be read, the answer is `false` (the gate holds).
 */
export async function releaseForced(db: Db | Trx, id: string): Promise<boolean> {
  try {
    const r = await db.selectFrom('releases').select('forced').where('id', '=', id).executeTakeFirst();
    return r?.forced ?? false;
  } catch {
    return false;
  }
}

/**
 * What holds a release's live runs, for {@link shownNextStep}: `draining` while on-call drains it
 * (`gatehouse queues drain`, or a rollback's step 2), `retired` when it is drained because its
 * canary was ended (`release retire`, or a rollback retiring open candidates: ADR 0728) — no
 * service of it runs any more, so only moving its work lets its runs go on — else null.
 */
export type ReleaseHold = 'draining' | 'retired' | null;

/** The {@link ReleaseHold} of a `releases` row (`draining`, `status`); null for no row. */
export function releaseHoldOf(release: { draining: boolean; status: string } | undefined): ReleaseHold {
  if (!release?.draining) return null;
  return release.status === 'retired' ? 'retired' : 'draining';
}

/**
 * What a `received` run with no next step of its own shows: the agent loop of its release has not
 * taken it yet. Usually for a moment; a run that stays here is one no agent loop of that release
 * takes (a canary whose services are not running), and the rep and on-call are told where to look
 * (docs/decisions/0768-a-received-run-says-what-it-waits-for.md).
 */
function notStartedStep(release: string): string {
  return (
    `Received: the agent loop of release ${release} starts on it when it takes the run, usually within seconds. ` +
    `If it stays here, on-call checks that release ${release}'s services are running (gatehouse stack status; the ops dashboard's stuck runs).`
  );
}

/**
 * The next step shown for a run (API and ops dashboard): its own (a `received` run without one:
 * {@link notStartedStep}), or — while its release holds it ({@link ReleaseHold}) and the run is
 * still live — that it is held and what lets it go on
 * (docs/decisions/0480-drain-held-by-the-ledger.md: the drain gate holds its jobs; the run itself
 * is not rewritten), before its own next step if it has one. A drained release goes on when
 * on-call resumes it or moves its work; a retired one only when its work is moved (requeue to the
 * serving release, or quarantine), as `release retire` prints.
 */
export function shownNextStep(wf: { state: WorkflowState; next_step: string | null; release_id: string }, by: ReleaseHold): string | null {
  if (!by || !LIVE_STATES.includes(wf.state)) return wf.next_step ?? (wf.state === 'received' ? notStartedStep(wf.release_id) : null);
  const r = wf.release_id;
  const held =
    by === 'retired'
      ? `Held: release ${r} was retired (its canary ended) and no service of it runs; this run goes on when on-call moves ` +
        `its work to the serving release (gatehouse queues requeue --from ${r} --to <active release>) or sets it aside ` +
        `(gatehouse queues quarantine --release ${r}).`
      : `Held: on-call is draining release ${r}; this run goes on when they resume it ` +
        `(gatehouse queues resume --release ${r}) or move its work (queues requeue / quarantine).`;
  return wf.next_step ? `${held} Then: ${wf.next_step}` : held;
}

/** The {@link ReleaseHold} of release `id` (null for an unknown id). */
export async function releaseHold(db: Db | Trx, id: string): Promise<ReleaseHold> {
  return releaseHoldOf(await db.selectFrom('releases').select(['draining', 'status']).where('id', '=', id).executeTakeFirst());
}
