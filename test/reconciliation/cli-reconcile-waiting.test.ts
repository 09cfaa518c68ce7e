import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setSwitch } from '@gatehouse/operations';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from '../executor/support/harness.ts';
import { seedStep } from './seed.ts';
import { harnessCli, reconOps } from './recon-ops.ts';

// `gatehouse reconcile` with an approved remediation that did not run (no signing key on this
// machine, or its tool switched off) exited 0 and showed the item only as
// `remediation=replay approval=<id>`, like one still pending: on-call could not see that a lead
// had approved it, nor what runs it. The exit code stays 0 — the pass ran; work left is printed
// (ADR 0705) — and a "remediations waiting" section names each one, why it waits and the next step.
// The real CLI process over a real ledger and the in-process systems of record.

let h: Harness;
let stateDir: string;
let token: string;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-reconcile-waiting-'));
  token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
});
afterAll(async () => {
  await h?.close();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

const { pass, liveItem, approvedRemediation } = reconOps(() => h);

const gatehouse = harnessCli(
  () => h,
  () => ({ stateDir, token }),
  120_000,
);

describe('gatehouse reconcile: approved remediations that did not run are listed with their next step', () => {
  it(
    'no signing key here, then its tool switched off: exit 0, each named with why and what runs it; nothing sent',
    { timeout: 300_000 },
    async () => {
      const orderId = await h.newOrder(45_000);
      const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 2_500, opStatus: 'succeeded' });
      await pass();
      const item = await liveItem(`op:${step.key}`);
      const t = await approvedRemediation(item.id, 'replay');

      const noKey = await gatehouse(['reconcile'], { GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: resolve(stateDir, 'absent.pem') });
      expect(noKey.code, `${noKey.stdout}\n${noKey.stderr}`).toBe(0);
      expect(noKey.stdout).toContain('remediations waiting (1):');
      expect(noKey.stdout).toContain(`item ${item.id}: replay (approval ${t.approvalId}, approved by lead-eli) — waiting: no_signing_key.`);
      expect(noKey.stdout).toMatch(/Next: the executor's reconcile job runs it .*GATEHOUSE_DELEGATION_SIGNING_KEY_PATH/);
      const json = await gatehouse(['reconcile', '--json'], { GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: resolve(stateDir, 'absent.pem') });
      expect(json.code, json.stderr).toBe(0);
      expect((JSON.parse(json.stdout) as { waiting: unknown[] }).waiting).toEqual([
        expect.objectContaining({
          itemId: item.id,
          approvalId: t.approvalId,
          approval: 'approved',
          approver: 'lead-eli',
          why: 'no_signing_key',
        }),
      ]);

      await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
      try {
        const held = await gatehouse(['reconcile']);
        expect(held.code, `${held.stdout}\n${held.stderr}`).toBe(0);
        expect(held.stdout).toContain(
          `item ${item.id}: replay (approval ${t.approvalId}, approved by lead-eli) — waiting: containment:issue_refund.`,
        );
        expect(held.stdout).toContain(
          `Next: gatehouse switch on issue_refund (or a re-enable stage admitting its tenant), then gatehouse reconcile resolve ${item.id}`,
        );
      } finally {
        await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
      }
      expect(await h.refunds(orderId)).toEqual([]);
      expect(await h.requests(orderId)).toEqual([]);
    },
  );
});
