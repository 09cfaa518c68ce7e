import { sql } from 'kysely';
import { advisoryLockId } from './advisory-locks.ts';
import type { Db, Trx } from './db.ts';
import { DependencyUnavailable } from './working-time.ts';

// Revocation of user bearer tokens (docs/decisions/0695-user-tokens-can-be-revoked.md). This
// module owns the rule: what a revocation is (a subject's not-before, or one token's `jti`), how it
// is stored (`user_token_not_before`, `user_token_revoked_jtis`), the one comparison that says a
// token is revoked, and the per-subject lock that orders a revocation against a decision made
// with that subject's token.

/** What the revocation rule reads of a verified token: its subject, `iat` and `jti` when present (seconds since the epoch). */
export interface TokenIdentity {
  sub: string;
  iat?: number;
  jti?: string;
}

/** The revocations that can concern a token: its subject's not-before (seconds since the epoch), and whether its `jti` is revoked. */
export interface SubjectRevocations {
  notBeforeS: number | null;
  jtiRevoked: boolean;
}

/** Why a token is revoked: `subject` (issued before its subject's not-before, or without `iat` under one) or `jti`. */
export type RevokedBecause = 'subject' | 'jti';

/**
 * The one comparison (ADR 0695): a token is revoked when its `jti` is revoked, or when its subject
 * has a not-before and the token was issued before it (`iat < notBeforeS`). A token without `iat`
 * under a not-before cannot show it was issued after it and is revoked (fail closed).
 * @returns why it is revoked, or null when it is not.
 */
export function revokedBecause(token: TokenIdentity, r: SubjectRevocations): RevokedBecause | null {
  if (r.jtiRevoked) return 'jti';
  if (r.notBeforeS === null) return null;
  if (token.iat === undefined || token.iat < r.notBeforeS) return 'subject';
  return null;
}

/** The advisory lock of `subject`'s tokens: exclusive for a revocation, shared for a decision made with one of them. */
function subjectLockId(subject: string): string {
  return advisoryLockId(`user_token:${subject}`);
}

/**
 * Takes `subject`'s token lock in `trx` (transaction-scoped): `exclusive` by a revocation,
 * `share` by a write that must not commit with a token revoked before it (an approval decision).
 * A revocation waits for the decisions in flight; a decision that waited for a revocation then
 * reads it (READ COMMITTED: each statement sees what committed before it started) and is refused.
 * Take it first in the transaction (lock order: this lock, then the rows of the write).
 */
export async function lockSubjectTokens(trx: Trx, subject: string, mode: 'share' | 'exclusive'): Promise<void> {
  const id = subjectLockId(subject);
  await (
    mode === 'share' ? sql`select pg_advisory_xact_lock_shared(${id}::bigint)` : sql`select pg_advisory_xact_lock(${id}::bigint)`
  ).execute(trx);
}

/**
 * The revocations of `token`'s subject and `jti`, read in `db` or `trx` (after
 * {@link lockSubjectTokens} for a decision).
 */
export async function readSubjectRevocations(db: Db | Trx, token: TokenIdentity): Promise<SubjectRevocations> {
  const nb = await db
    .selectFrom('user_token_not_before')
    .select(sql<string>`extract(epoch from not_before)::bigint`.as('s'))
    .where('subject', '=', token.sub)
    .executeTakeFirst();
  const jti = token.jti
    ? await db.selectFrom('user_token_revoked_jtis').select('jti').where('jti', '=', token.jti).executeTakeFirst()
    : undefined;
  return { notBeforeS: nb ? Number(nb.s) : null, jtiRevoked: jti !== undefined };
}

/**
 * Every revocation, for a verifier's cache: subject → not-before (seconds since the epoch), and the
 * revoked `jti`s. Rows are few (one per revoked subject, one per revoked token).
 * @throws DependencyUnavailable(`postgres`) when they cannot be read (the caller fails closed).
 */
export async function loadUserTokenRevocations(db: Db): Promise<{ notBeforeS: Map<string, number>; jtis: Set<string> }> {
  try {
    const [subjects, jtis] = await Promise.all([
      db
        .selectFrom('user_token_not_before')
        .select(['subject', sql<string>`extract(epoch from not_before)::bigint`.as('s')])
        .execute(),
      db.selectFrom('user_token_revoked_jtis').select('jti').execute(),
    ]);
    return { notBeforeS: new Map(subjects.map((r) => [r.subject, Number(r.s)])), jtis: new Set(jtis.map((r) => r.jti)) };
  } catch (err) {
    throw new DependencyUnavailable('postgres', `user token revocations cannot be read: ${(err as Error).message}`, { cause: err });
  }
}

/** What {@link storeUserTokenRevocation} recorded: the subject's not-before (seconds), or the `jti` revoked; `changed` false when it was already so. */
export type StoredRevocation = { kind: 'subject'; notBeforeS: number; changed: boolean } | { kind: 'jti'; jti: string; changed: boolean };

/**
 * Records a revocation in `trx`, under `subject`'s exclusive lock ({@link lockSubjectTokens},
 * taken here). Without `jti`: every token of `subject` issued before now is revoked — the
 * not-before is the database's clock rounded up to the next whole second (`iat` has whole seconds,
 * so a token issued in the second of the revocation is revoked too), and only ever moves forward.
 * With `jti`: that one token (idempotent: a second revocation of it changes nothing).
 */
export async function storeUserTokenRevocation(
  trx: Trx,
  r: { subject: string; jti?: string; by: string; reason: string },
): Promise<StoredRevocation> {
  await lockSubjectTokens(trx, r.subject, 'exclusive');
  if (r.jti !== undefined) {
    const row = await trx
      .insertInto('user_token_revoked_jtis')
      .values({ jti: r.jti, subject: r.subject, revoked_by: r.by, reason: r.reason })
      .onConflict((oc) => oc.column('jti').doNothing())
      .returning('jti')
      .executeTakeFirst();
    return { kind: 'jti', jti: r.jti, changed: row !== undefined };
  }
  const before = await readSubjectRevocations(trx, { sub: r.subject });
  const row = await trx
    .insertInto('user_token_not_before')
    .values({
      subject: r.subject,
      not_before: sql`to_timestamp(ceil(extract(epoch from clock_timestamp())))`,
      revoked_by: r.by,
      reason: r.reason,
    })
    .onConflict((oc) =>
      oc.column('subject').doUpdateSet({
        not_before: sql`greatest(user_token_not_before.not_before, excluded.not_before)`,
        revoked_by: r.by,
        reason: r.reason,
        revoked_at: sql`now()`,
      }),
    )
    .returning(sql<string>`extract(epoch from not_before)::bigint`.as('s'))
    .executeTakeFirstOrThrow();
  const notBeforeS = Number(row.s);
  return { kind: 'subject', notBeforeS, changed: before.notBeforeS !== notBeforeS };
}

/**
 * The in-transaction check of a write made with a user's token (an approval decision): takes
 * `token.sub`'s shared lock, then reads its revocations, in `trx`. So the write either commits
 * before a revocation of that token commits (the revocation waits for its lock), or it sees the
 * revocation — never commits after it with the revoked token.
 * @returns why the token is revoked, or null when the write may go on.
 */
export async function fenceSubjectTokens(trx: Trx, token: TokenIdentity): Promise<RevokedBecause | null> {
  await lockSubjectTokens(trx, token.sub, 'share');
  return revokedBecause(token, await readSubjectRevocations(trx, token));
}
