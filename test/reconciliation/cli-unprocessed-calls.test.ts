import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setSwitch } from '@gatehouse/operations';
import { freePort } from '@gatehouse/test-harness';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from '../executor/support/harness.ts';
import { seedStep } from './seed.ts';
import { harnessCli, reconOps } from './recon-ops.ts';

// A command that calls a system of record never exits 0 for work it did not do (ADR 0701):
// `gatehouse change cancel` and `gatehouse reconcile resolve` against a system of record that does
// not process the call (nothing listens on its port) exit 4 naming it, its host:port and how to
// check it — they exited 0 before, with "run this command again" on stdout; a refusal (4xx) exits
// 1 with the system's reason; containment's hold is printed from the outcome's typed field.
// The real CLI process, over a real ledger and the in-process staging systems of record.

/** The CLI's documented exit codes (docs/product/public-contract.md#ops-cli). */
const EXIT = { ok: 0, failed: 1, unavailable: 4 } as const;

let h: Harness;
let stateDir: string;
let token: string;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-unprocessed-'));
  token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
});
afterAll(async () => {
  await h?.close();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

const { pass, liveItem, op, approvedRemediation } = reconOps(() => h);

const gatehouse = harnessCli(
  () => h,
  () => ({ stateDir, token }),
  90_000,
);

/** A succeeded `schedule_change` step of quillfeather, as the executor leaves it; returns its operation key. */
async function scheduledChange(): Promise<string> {
  return (await seedStep(h.db, { tool: 'schedule_change', orderId: 'plan_seeded', opStatus: 'succeeded', answered: false })).key;
}

/** What the approval API writes when own-kim (a change owner of quillfeather) approves the cancel of `operationKey`. */
async function approveCancel(approvalId: string): Promise<void> {
  await h.db
    .updateTable('approvals')
    .set({ status: 'approved', approver: 'own-kim', decided_at: new Date() })
    .where('id', '=', approvalId)
    .execute();
  const ap = await h.db.selectFrom('approvals').select('action_id').where('id', '=', approvalId).executeTakeFirstOrThrow();
  await h.db.updateTable('actions').set({ status: 'approved' }).where('id', '=', ap.action_id).execute();
}

const approvalIn = (out: string): string => /approval ([0-9a-f-]{36})/.exec(out)![1]!;

describe('gatehouse change cancel', () => {
  it(
    'the change service not answering: exit 4 naming it, nothing cancelled (was exit 0); refused (4xx): exit 1 with its reason',
    { timeout: 240_000 },
    async () => {
      const operationKey = await scheduledChange();
      const asked = await gatehouse(['change', 'cancel', operationKey, '--reason', 'postponed by the customer']);
      expect(asked.code, asked.stderr).toBe(EXIT.ok);
      expect(asked.stdout).toMatch(/^requested: cancel of /m);
      const approvalId = approvalIn(asked.stdout);
      await approveCancel(approvalId);

      const port = await freePort();
      const down = await gatehouse(['change', 'cancel', operationKey], { STAGING_URL: `http://127.0.0.1:${port}` });
      expect(down.code, `${down.stdout}\n${down.stderr}`).toBe(EXIT.unavailable);
      expect(down.stderr).toMatch(
        new RegExp(
          `the cancel of ${operationKey} did not run: the change service \\(127\\.0\\.0\\.1:${port}\\) did not process it \\(no_response:ECONNREFUSED\\)`,
        ),
      );
      expect(down.stderr).toContain(`curl -s http://127.0.0.1:${port}/readyz`);
      expect(down.stdout).not.toMatch(/cancelled/);
      // Nothing done: the cancel waits under its key, its approval consumed once; the change stands.
      expect(await op(`cancel:${operationKey}`)).toMatchObject({ status: 'pending' });
      expect((await op(operationKey)).status).toBe('succeeded');

      // The change service answers and refuses: it has no such operation (404). Exit 1 with its reason.
      const refused = await gatehouse(['change', 'cancel', operationKey]);
      expect(refused.code, `${refused.stdout}\n${refused.stderr}`).toBe(EXIT.failed);
      expect(refused.stdout).toMatch(new RegExp(`${operationKey}: refused \\(404:operation_not_found\\)\\. Next step: `));
      expect(await op(`cancel:${operationKey}`)).toMatchObject({ status: 'failed', error: '404:operation_not_found' });
    },
  );
});

describe('gatehouse reconcile resolve', () => {
  it(
    'the payments ledger not answering: exit 4 naming the systems of record, nothing paid (was exit 0); then it runs once',
    { timeout: 240_000 },
    async () => {
      const orderId = await h.newOrder(45_000);
      const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 2_500, opStatus: 'succeeded' });
      await pass();
      const item = await liveItem(`op:${step.key}`);
      await approvedRemediation(item.id, 'replay');

      const port = await freePort();
      const down = await gatehouse(['reconcile', 'resolve', item.id], { STAGING_URL: `http://127.0.0.1:${port}` });
      expect(down.code, `${down.stdout}\n${down.stderr}`).toBe(EXIT.unavailable);
      expect(down.stderr).toMatch(
        new RegExp(
          `the replay of item ${item.id} did not run: the systems of record \\(127\\.0\\.0\\.1:${port}\\) did not process it \\(no_response:ECONNREFUSED\\)`,
        ),
      );
      expect(down.stderr).toContain(`curl -s http://127.0.0.1:${port}/readyz`);
      expect(await h.refunds(orderId)).toEqual([]);
      expect(await op(`recon_${item.id}`)).toMatchObject({ status: 'pending' });

      const done = await gatehouse(['reconcile', 'resolve', item.id]);
      expect(done.code, `${done.stdout}\n${done.stderr}`).toBe(EXIT.ok);
      expect(done.stdout).toMatch(new RegExp(`item ${item.id} resolved: replay approved by lead-eli`));
      expect((await h.refunds(orderId)).map((r) => [r.idempotencyKey, r.amountCents])).toEqual([[step.key, 2_500]]);
    },
  );

  it('held by containment: printed from the outcome’s tool (ADR 0692), nothing sent, exit 0', { timeout: 240_000 }, async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 1_500, opStatus: 'succeeded' });
    await pass();
    const item = await liveItem(`op:${step.key}`);
    await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
    try {
      await approvedRemediation(item.id, 'replay');
      const held = await gatehouse(['reconcile', 'resolve', item.id]);
      expect(held.code, `${held.stdout}\n${held.stderr}`).toBe(EXIT.ok);
      expect(held.stdout).toContain(`item ${item.id}: held — issue_refund is switched off (containment)`);
      expect(held.stdout).toContain('gatehouse switch on issue_refund');
      expect(await h.refunds(orderId)).toEqual([]);
      expect(await h.requests(orderId)).toEqual([]);
    } finally {
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    }
  });
});
