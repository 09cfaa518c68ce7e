import { sql } from 'kysely';
import { randomInt } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '@gatehouse/ledger';
import { createProposal } from '@gatehouse/testing';
import { processProposal } from '@gatehouse/policy-gateway';
import { countingDb } from '../executor/support/counting-db.ts';
import { AUDIT_HMAC_KEY, BUNDLES, RELEASE, startHarness, type Harness } from '../executor/support/harness.ts';

// docs/decisions/0340-refund-sums-on-the-action-row.md: how many statements the policy gateway
// sends the ledger for one ALLOW refund proposal, counted at the pg client (BEGIN/COMMIT
// included; the order system's HTTP read is not a statement).

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

describe('policy gateway: statements for one ALLOW refund proposal', () => {
  it('counts every statement sent to the ledger', async () => {
    // An order id the tool's argument check accepts (a letter, a dash, four digits), paid 500.00.
    const orderId = `Q-${randomInt(1000, 9999)}`;
    await h.staging
      .insertInto('staging.orders')
      .values({ id: orderId, tenant: 'quillfeather', region: 'US', customer: 'cust-2', paid_cents: 50_000, status: 'shipped' })
      .execute();
    const p = await createProposal(h.db, { tool: 'issue_refund', arguments: { orderId, amount: '31.00', reason: 'damaged item' } });
    statements.length = 0;
    const outcome = await processProposal(
      { release: RELEASE, ...p },
      { db: counted, relay: h.relay, log: h.log, bundles: BUNDLES, stagingUrl: h.stagingUrl, auditHmacKey: AUDIT_HMAC_KEY },
    );
    expect(outcome).toMatch(/^ALLOW/);
    console.log(`statements: ${statements.length}`);
    if (process.env.STATEMENTS_VERBOSE) console.log(statements.join('\n'));
    // ADR 0340: 23 before the run's lock carried its decision context and the run's versions were
    // read once (the lock, the offered state and the release's writes were three statements; the
    // same-target versions and the last version number two); 20 before a workflow transition
    // bumped its event seq in its own state update (ADR 0350); 19 before the move to `executing`
    // became one conditional UPDATE on the state the run's lock had read, returning the event's
    // actions view with it, and 16 before the proposal, its run and its call item were read in one
    // statement (ADR 0390); 14 before the action's decision_log row and its audit event were
    // written by the action's insert (ADR 0420). 13 since ADR 0450: the refund's sums are read once
    // more, without the limit locks and outside the transaction, beside the order system's read; 12
    // since ADR 0470: the limit locks and the sums under them are one statement; 11 since ADR 0540:
    // the move's workflow event is built in SQL by the move's own statement.
    expect(statements.length).toBeLessThanOrEqual(11);
    // the limit locks are taken last (ADR 0450), with their sums in one statement (ADR 0470): held
    // for that statement and the COMMIT only
    const decide = statements.slice(statements.indexOf('begin'));
    expect(decide.slice(-2).map((s) => s.trim().slice(0, 40))).toEqual([
      expect.stringMatching(/^SELECT \* FROM refund_limit_sums_locked\(/),
      'commit',
    ]);
    expect(decide.filter((s) => /pg_advisory_xact_lock|refund_limit_sums/.test(s))).toHaveLength(1);
    expect(statements.slice(0, statements.indexOf('begin')).filter((s) => /^SELECT \* FROM refund_limit_sums\(/.test(s))).toHaveLength(1);
    expect(statements.filter((s) => /^insert into "(audit_outbox|decision_log)"/.test(s))).toEqual([]);
    // both are still written, once each
    const decisions = await h.db.selectFrom('decision_log').select('decision').where('proposal_id', '=', p.proposalId).execute();
    expect(decisions).toEqual([{ decision: 'ALLOW' }]);
    const events = await h.db
      .selectFrom('audit_outbox')
      .select(sql<string>`event->>'type'`.as('type'))
      .where(sql<boolean>`event->>'runId' = ${p.workflowId}`)
      .execute();
    expect(events.filter((e) => e.type === 'policy.decision')).toHaveLength(1);
  });
});
