import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHarness, type Harness } from '../executor/support/harness.ts';
import { harnessCli } from './recon-ops.ts';
import { seedStep } from './seed.ts';

// On-call leftovers of `gatehouse change cancel` (the real CLI process over a real ledger and the
// in-process staging change service):
// - without --reason, the run that would ask for the cancel exited 1 (a refusal); it is a usage
//   error: exit 2 naming --reason, nothing requested;
// - on a change whose schedule_change still awaits its own approval it answered "no scheduled
//   change has the operation key" with no hint; it names that approval, the one to deny (ADR 0703).

const EXIT = { failed: 1, usage: 2 } as const;

let h: Harness;
let stateDir: string;
let token: string;
beforeAll(async () => {
  h = await startHarness({ poolSize: 4 });
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-cancel-hints-'));
  token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
});
afterAll(async () => {
  await h?.close();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

const gatehouse = harnessCli(
  () => h,
  () => ({ stateDir, token }),
  90_000,
);

/**
 * A `schedule_change` step of quillfeather: `succeeded` with its operation (as the executor
 * leaves it), or `pending_approval` with a pending change-owner approval and no operation (as
 * the gateway leaves it). Returns its operation key, workflow and approval ids.
 */
async function scheduleStep(status: 'succeeded' | 'pending_approval'): Promise<{ key: string; workflowId: string; approvalId: string }> {
  const pending = status === 'pending_approval';
  const step = await seedStep(h.db, {
    tool: 'schedule_change',
    orderId: 'plan_seeded',
    opStatus: pending ? null : 'succeeded',
    actionStatus: status,
    workflowState: pending ? 'awaiting_approval' : 'completed',
    approval: pending ? 'pending' : 'used',
    answered: !pending,
  });
  return { key: step.key, workflowId: step.workflowId, approvalId: step.approvalId! };
}

/** Cancel requests recorded in the ledger for `operationKey` (cancel_change actions). */
async function cancelRequests(operationKey: string): Promise<number> {
  const rows = await h.db
    .selectFrom('actions')
    .select('id')
    .where('tool', '=', 'cancel_change')
    .where('target', '=', operationKey)
    .execute();
  return rows.length;
}

/** Cancel calls the change service received for `operationKey` (its request log). */
async function cancelCalls(operationKey: string): Promise<number> {
  const r = await sql<{ n: number }>`select count(*)::int as n from staging.request_log
    where target = 'changes' and path = ${`/changes/operations/${encodeURIComponent(operationKey)}/cancel`}`.execute(h.db);
  return r.rows[0]!.n;
}

describe('gatehouse change cancel: usage and next steps', () => {
  it(
    'without --reason on a scheduled change: exit 2 naming --reason, no cancel requested, nothing sent',
    { timeout: 120_000 },
    async () => {
      const { key } = await scheduleStep('succeeded');
      const r = await gatehouse(['change', 'cancel', key]);
      expect(r.code, r.stdout + r.stderr).toBe(EXIT.usage);
      expect(r.stderr).toMatch(/change cancel needs --reason <why>/);
      expect(await cancelRequests(key)).toBe(0);
      expect(await cancelCalls(key)).toBe(0);
      // With it, the request is recorded (exit 0): the flag was the only thing missing.
      const asked = await gatehouse(['change', 'cancel', key, '--reason', 'postponed by the customer']);
      expect(asked.code, asked.stdout + asked.stderr).toBe(0);
      expect(await cancelRequests(key)).toBe(1);
    },
  );

  it(
    'on a change whose schedule_change awaits its own approval: exit 1 naming that approval and how to deny it; nothing requested or sent',
    { timeout: 120_000 },
    async () => {
      const { key, workflowId, approvalId } = await scheduleStep('pending_approval');
      for (const ref of [key, workflowId]) {
        const r = await gatehouse(['change', 'cancel', ref, '--reason', 'not wanted any more']);
        expect(r.code, r.stdout + r.stderr).toBe(EXIT.failed);
        expect(r.stderr).toContain(`is pending_approval, not scheduled: it awaits its own approval ${approvalId}`);
        expect(r.stderr).toContain(`denies approval ${approvalId}`);
        expect(r.stderr).toContain(`POST /v1/approvals/${approvalId}/decision {"decision":"deny"`);
      }
      expect(await cancelRequests(key)).toBe(0);
      expect(await cancelCalls(key)).toBe(0);
      expect(await h.db.selectFrom('approvals').select('status').where('id', '=', approvalId).executeTakeFirstOrThrow()).toEqual({
        status: 'pending',
      });
    },
  );
});
