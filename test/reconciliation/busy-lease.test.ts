import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executeRemediation } from '@gatehouse/reconciliation';
import { reserveOperation } from '@gatehouse/ledger';
import { startHarness, type Harness } from '../executor/support/harness.ts';
import { seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// A remediation whose lease another process holds is `busy`: nothing is claimed or sent. The
// holder may be a CLI that died, which keeps the lease until it ends; the outcome carries when
// that is, and the CLI's line says to run the command again after then (it takes over:
// apps/cli/test/remediation-outcome.unit.test.ts).
// Before, the line said only "another process is executing its remediation".

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

const { pass, remediation, liveItem, approvedRemediation } = reconOps(() => h);

describe('a remediation whose lease another process holds', () => {
  it('is busy until the lease ends, says when, and sends nothing', async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3_000, opStatus: 'succeeded' });
    await pass();
    const item = await liveItem(`op:${step.key}`);
    const t = await approvedRemediation(item.id, 'replay');
    // A CLI claimed it and died: its operation is running under a lease a minute long.
    const action = await h.db.selectFrom('actions').selectAll().where('operation_key', '=', t.operationKey).executeTakeFirstOrThrow();
    await reserveOperation(h.db, action);
    const leaseUntil = new Date(Date.now() + 60_000);
    await h.db
      .updateTable('operations')
      .set({ status: 'running', fencing_token: '1', lease_expires_at: leaseUntil })
      .where('key', '=', t.operationKey)
      .execute();

    const busy = await executeRemediation(remediation(), item.id);
    expect(busy).toMatchObject({ state: 'busy', itemId: item.id });
    expect(busy.state === 'busy' && busy.leaseUntil?.getTime()).toBe(leaseUntil.getTime());
    expect(await h.refunds(orderId)).toEqual([]);
  });
});
