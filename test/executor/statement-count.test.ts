import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import type { Db } from '@gatehouse/ledger';
import { processExecution } from '@gatehouse/executor';
import { countingDb } from './support/counting-db.ts';
import { startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0270-one-operation-protocol.md: how many statements the executor sends the ledger
// for one ALLOW refund, counted at the pg client (every statement, BEGIN/COMMIT included).

let h: Harness;
let counted: Db;
const statements: string[] = [];
beforeAll(async () => {
  h = await startHarness();
  counted = countingDb(h.tdb.url, statements);
});
afterAll(async () => {
  await counted?.destroy();
  await h?.close();
});

/** The `operation.replayed` audit events written for a run. */
const replayedEvents = (workflowId: string) =>
  h.db
    .selectFrom('audit_outbox')
    .select('event')
    .where(sql<boolean>`event->>'type' = 'operation.replayed' and event->>'runId' = ${workflowId}`)
    .execute();

/** The types of the audit events written for a run, in the order they were written. */
const auditTypes = async (workflowId: string) =>
  (
    await h.db
      .selectFrom('audit_outbox')
      .select(sql<string>`event->>'type'`.as('type'))
      .where(sql<boolean>`event->>'runId' = ${workflowId}`)
      .orderBy('id')
      .execute()
  ).map((e) => e.type);

/** The statements of the claim transaction: from the first BEGIN to its COMMIT. */
function claimTransaction(all: string[]): string[] {
  const begins = all.flatMap((s, i) => (/^begin/i.test(s) ? [i] : []));
  // the claim is the transaction that grants the lease (sets status running)
  for (const b of begins) {
    const end = all.findIndex((s, i) => i > b && /^commit|^rollback/i.test(s));
    const tx = all.slice(b, end + 1);
    if (tx.some((s) => /update "operations" set "status" = \$1, "fencing_token" = fencing_token \+ 1|fencing_token \+ 1/.test(s)))
      return tx;
  }
  return [];
}

describe('executor: statements for one ALLOW refund', () => {
  it('counts every statement sent to the ledger and those of the claim transaction', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3100 });
    statements.length = 0;
    expect(await processExecution(a.job, h.deps({ db: counted }))).toBe('succeeded');
    const claim = claimTransaction(statements);
    console.log(`statements: total ${statements.length}, claim transaction ${claim.length}`);
    if (process.env.STATEMENTS_VERBOSE) console.log(statements.join('\n'));
    // ADR 0270: 41 statements (claim transaction 24) before the operation protocol, 34 (20) after;
    // the workflow event of the claim's move to `executing` adds 3 (ADR 0250: the event number, the
    // action view in one query, the event and its webhook deliveries in one insert); the
    // re-evaluation's four refund sums in one statement (`refundSums`) take 2 off, and the run's
    // lock carrying the re-evaluation's context (offered state, release writes; ADR 0340) 2 more;
    // the workflow transition bumping its event seq in its state update 1, and the record reusing
    // the claim's audit fields 1 (ADR 0350); the action's and the run's transitions as one
    // conditional UPDATE each on the rows the claim and the record hold locked, 6 (claim 4), the
    // event's actions view returned by the run's UPDATE and the deadline read with the run's lock,
    // 2 more, the record's action lock joined to its fenced UPDATE 1 more (ADR 0390); the workflow
    // read with the action, and the audit fields' basis with them (read once per job), 2 more
    // (claim 1; ADR 0350); the revocation epoch read with the action, and the claim's and the
    // record's audit events written by the lease's UPDATE and the `results` job's insert, 3 more
    // (claim 1; ADR 0420); the re-evaluation's limit locks and its sums as one statement, 1 more
    // (claim 1; ADR 0470); the action's moves to `running` and to its outcome written by the
    // statements of the operation's grant and fenced record, 2 more (claim 1; ADR 0530); the
    // workflow event built in SQL by the run's transition statement, and the `results` job with its
    // event written by the fenced record's statement, 2 more (claim 1; ADR 0540); the run's lock
    // read with the action's and the operation's reservation, and the run's move with its event and
    // the limit locks with their sums riding on the grant, 3 more (claim 3; ADR 0620): the checks
    // and the claim are two statements between BEGIN and COMMIT. The containment lock (shared)
    // adds 1 (claim 1; ADR 0683): a switch-off committed while the job read the order holds the
    // step, and one made during the claim waits for its commit; the switch is read again by the
    // checks' statement, whose snapshot is taken after the lock.
    expect(statements.length).toBeLessThanOrEqual(10);
    expect(claim.length).toBeLessThanOrEqual(5);
    // first the tool's containment lock, shared (ADR 0683)
    expect(claim[1]).toMatch(/^select pg_advisory_xact_lock_shared\(/);
    // the checks' statement reads the switch again, on a snapshot taken after that lock
    expect(claim[2]).toMatch(/"s"."enabled" as "switch_enabled", "s"."changed_at" as "switch_changed_at"/);
    // it locks the run, then the action, then reserves the operation (ADR 0014)
    expect(claim[2]).toMatch(
      /^\s*with w as \(select .* from "workflows" as "w" where "w"."id" = \$\d+ for update\),\s*a as \(select \* from actions where id = \$\d+ and exists \(select 1 from w\) and workflow_id = \(select w.id from w\) for update\),\s*op as \(\s*insert into operations/s,
    );
    // no workflow event is a statement of its own: it rides on the transition it describes
    expect(statements.filter((s) => /^with "event" as|^insert into "workflow_events"/.test(s))).toEqual([]);
    // no action transition is a statement of its own: each rides on its operation's write
    expect(statements.filter((s) => /^update "actions"/.test(s))).toEqual([]);
    // the limit locks are taken last (ADR 0430), with their sums in one statement (ADR 0470), the
    // grant's (ADR 0620): held for that statement and the COMMIT only
    const [grant, commit] = claim.slice(-2);
    expect(commit).toBe('commit');
    expect(grant).toMatch(/"granted" as \(update "operations"/);
    expect(grant).toMatch(/"moved" as \(update "workflows"/);
    expect(grant).toMatch(/\(select to_jsonb\(s\) from refund_limit_sums_locked\([^)]*\) s\) as "read" from "granted"$/);
    expect(statements.filter((s) => /refund_limit_sums/.test(s))).toHaveLength(1);
    // no limit lock is a statement of its own (the containment lock above is the only advisory lock statement)
    expect(claim.filter((s) => /pg_advisory_xact_lock/.test(s))).toHaveLength(1);
    // no audit event is a statement of its own: each rides on the state change it describes, and
    // each is still written, once
    expect(statements.filter((s) => /^insert into "audit_outbox"/.test(s))).toEqual([]);
    expect((await auditTypes(a.workflowId)).filter((t) => t.startsWith('operation.'))).toEqual([
      'operation.claimed',
      'operation.succeeded',
    ]);
  });
});

describe('executor: statements for one approved refund', () => {
  it("adds only the approval's consumption to the claim, its event riding on it (ADR 0620)", async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 7100 });
    expect(a.approvalId).not.toBeNull();
    statements.length = 0;
    expect(await processExecution(a.job, h.deps({ db: counted }))).toBe('succeeded');
    const claim = claimTransaction(statements);
    if (process.env.STATEMENTS_VERBOSE) console.log(claim.join('\n'));
    // BEGIN, the containment lock and switch read (ADR 0683), the checks, the consumption with its
    // `approval.consumed` event, the grant, COMMIT
    expect(claim.length).toBeLessThanOrEqual(7);
    expect(claim.filter((s) => /update "approvals"/.test(s))).toHaveLength(1);
    expect(statements.filter((s) => /^insert into "audit_outbox"/.test(s))).toEqual([]);
    expect((await auditTypes(a.workflowId)).filter((t) => t === 'approval.consumed' || t.startsWith('operation.'))).toEqual([
      'approval.consumed',
      'operation.claimed',
      'operation.succeeded',
    ]);
  });
});

describe('executor: a redelivery answered without a claim (ADR 0350)', () => {
  it('a finished refund delivered again replays its stored outcome in 2 statements, without a transaction, a row lock or a second result', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3200 });
    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    // the first result is published (as the relay does right after the record commits)
    await h.db.updateTable('outbox').set({ published_at: new Date() }).where('job_id', '=', `result_${a.workflowId}_${a.callId}`).execute();
    statements.length = 0;
    expect(await processExecution(a.job, h.deps({ db: counted }))).toBe('replay:succeeded');
    if (process.env.STATEMENTS_VERBOSE) console.log(statements.join('\n'));
    // the action with its run, operation and audit basis; the `operation.replayed` event, written
    // only if the result was published. 14 with the claim's locks and a second result job before
    // ADR 0350 answered it from the action's read; 7 after (a separate workflow read, a transaction
    // around the published check, the audit fields read apart).
    expect(statements.length).toBeLessThanOrEqual(2);
    expect(statements.filter((s) => /^(begin|commit)/i.test(s))).toEqual([]);
    expect(statements.filter((s) => /for update|for no key update/i.test(s))).toEqual([]);
    const results = await h.db.selectFrom('outbox').select('id').where('job_id', '=', `result_${a.workflowId}_${a.callId}`).execute();
    expect(results).toHaveLength(1);
    expect(await replayedEvents(a.workflowId)).toHaveLength(1);
  });

  it('a redelivery whose result was never published writes it again with the event, in one transaction, and publishes it', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3300 });
    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    await h.relay.flushMarks(); // the relay marks rows published in batches
    const jobId = `result_${a.workflowId}_${a.callId}`;
    // as if the record's writer died after its commit, before publishing
    await h.db.updateTable('outbox').set({ published_at: null }).where('job_id', '=', jobId).execute();
    statements.length = 0;
    expect(await processExecution(a.job, h.deps({ db: counted }))).toBe('replay:succeeded');
    const begin = statements.findIndex((s) => /^begin/i.test(s));
    const commit = statements.findIndex((s) => /^commit/i.test(s));
    expect(begin).toBeGreaterThan(-1);
    const inTx = statements.slice(begin, commit);
    expect(inTx.some((s) => /insert into "outbox"/.test(s))).toBe(true);
    expect(inTx.some((s) => /insert into "audit_outbox"/.test(s))).toBe(true);
    await h.relay.flushMarks();
    const rows = await h.db.selectFrom('outbox').select(['published_at']).where('job_id', '=', jobId).execute();
    expect(rows.filter((r) => r.published_at !== null)).toHaveLength(1);
    expect(await replayedEvents(a.workflowId)).toHaveLength(1);
  });
});
