import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { loadDelegationSigningKey } from '../../packages/credentials/src/index.ts';
import { cancelTicketId, executeChangeCancel, type ExecuteDeps } from '../../packages/reconciliation/src/index.ts';
import { execFile } from 'node:child_process';
import { resolve as resolvePath } from 'node:path';
import { repoRoot, resetTestFaultsForTests } from '@gatehouse/contracts';
import { actorHash } from '@gatehouse/ledger';
import {
  startHuntStack,
  submit,
  waitFor,
  settled,
  getApproval,
  decide,
  call,
  tokenFor,
  waitUntil,
  auditHeartbeatOlderThan,
  SECRET,
  type HuntStack,
} from '../hard-cases/helpers.ts';

/**
 * Cancel-before-start of a scheduled change (docs/decisions/0280-cancel-a-scheduled-change.md):
 * the change approval promises "rollback: cancel-before-start"; an operator asks, a change owner
 * approves, the cancel runs once, the change service reads back `cancelled`, and the schedule
 * step ends `compensated`. Too late (window started): refused with a terminal state and a next step.
 */
let s: HuntStack;
let deps: ExecuteDeps;
beforeAll(async () => {
  s = await startHuntStack();
  deps = {
    db: s.db.db,
    stagingUrl: s.url('staging'),
    hmacKey: s.env.GATEHOUSE_AUDIT_HMAC_KEY ?? 'local-audit-hmac-change-me',
    release: 'rel-1',
    signingKey: await loadDelegationSigningKey(s.env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH!),
  };
}, 600_000); // seven processes start slowly on a loaded 2-core machine
afterAll(async () => {
  delete process.env.GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL;
  resetTestFaultsForTests();
  await s?.close();
});

/** Prepares, approves (own-kim) and schedules a change ticket; returns the operation key at the change service. */
async function scheduled(ticket: string, text: string): Promise<{ operationKey: string; workflowId: string }> {
  const { token, workflowId } = await submit(s, 'eng-lou', ticket, text, 'act', 'change');
  const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
  const p = v.pendingApprovals[0]!;
  const ok = await decide(s, 'own-kim', p.approvalId, {
    decision: 'approve',
    actionVersion: p.actionVersion,
    actionDigest: p.actionDigest,
  });
  expect(ok.status).toBe(200);
  const done = await waitFor(s, token, workflowId, settled);
  expect(done.state).toBe('completed');
  const op = await sql<{ operation_key: string }>`select operation_key from staging.change_operations
    where operation_key in (select operation_key from actions where workflow_id = ${workflowId})`.execute(s.db.db);
  expect(op.rows).toHaveLength(1);
  // The write-ahead mark recorded the epoch its token carried (the containment monitor reads it).
  const epochs = await sql<{ token_epoch: number | null; current: number }>`select o.token_epoch,
      (select epoch from credential_epochs where id = 1) as current from operations o where o.key = ${op.rows[0]!.operation_key}`.execute(
    s.db.db,
  );
  expect(epochs.rows[0]!.token_epoch).toBe(epochs.rows[0]!.current);
  return { operationKey: op.rows[0]!.operation_key, workflowId };
}

/** Cancel requests the change service received for this operation: [status, reason] each. */
async function cancelCalls(operationKey: string): Promise<Array<[number | null, string | null]>> {
  const r = await sql<{ status: number | null; reason: string | null }>`select status, reason from staging.request_log
    where target = 'changes' and path = ${`/changes/operations/${encodeURIComponent(operationKey)}/cancel`} order by id`.execute(s.db.db);
  return r.rows.map((x) => [x.status, x.reason]);
}

async function scheduleStatus(operationKey: string): Promise<string> {
  const r = await sql<{ status: string }>`select a.status from operations o join actions a on a.id = o.action_id
    where o.key = ${operationKey}`.execute(s.db.db);
  return r.rows[0]!.status;
}

/** Runs the real `gatehouse` CLI as `as` (an operator): its stdout and stderr whatever the exit code. */
async function cliOut(args: string[], as = 'ops-gus', env: Record<string, string> = {}): Promise<string> {
  const token = await tokenFor(as, SECRET);
  return new Promise((done) => {
    execFile(
      process.execPath,
      [resolvePath(repoRoot, 'apps/cli/src/main.ts'), ...args],
      { cwd: repoRoot, env: { ...process.env, ...s.env, ...env, LOG_LEVEL: 'warn', GATEHOUSE_TOKEN: token }, timeout: 120_000 },
      (err, stdout, stderr) => done(`${stdout}${stderr}${err ? `\nexit ${err.code}` : ''}`),
    );
  });
}

const approvalIdIn = (out: string): string => /approval ([0-9a-f-]{36})/.exec(out)![1]!;

describe('gatehouse change cancel', () => {
  it(
    'requested, refused without approval, approved by a change owner (not the requester), executed once, read back cancelled',
    { timeout: 600_000 },
    async () => {
      const { operationKey, workflowId } = await scheduled('CX-1', 'Please schedule change CHG-101 in the next maintenance window.');
      const noReason = await cliOut(['change', 'cancel', operationKey]);
      expect(noReason).toMatch(/invalid_reason|--reason/);

      const asked = await cliOut(['change', 'cancel', workflowId, '--reason', 'customer asked to postpone']);
      console.log('requested:', asked.trim());
      expect(asked).toMatch(/^requested: cancel of /m);
      const approvalId = approvalIdIn(asked);

      // Without the change owner's approval nothing reaches the change service.
      const early = await cliOut(['change', 'cancel', operationKey]);
      expect(early).toMatch(/refused — approval .* is still pending/);
      expect(await cancelCalls(operationKey)).toEqual([]);

      const shown = await getApproval(s, 'own-kim', approvalId);
      expect(shown.status).toBe(200);
      expect(shown.body).toMatchObject({ tool: 'cancel_change', requester: 'ops-gus', approverRole: 'change_owner', target: operationKey });
      const body = { decision: 'approve', actionVersion: shown.body.actionVersion, actionDigest: shown.body.actionDigest };
      const refusals: Record<string, string> = {};
      for (const who of ['ops-gus', 'eng-lou', 'ops-ida']) {
        const r = await decide(s, who, approvalId, body);
        refusals[who] = `${r.status} ${String((r.body.error as { reason?: string } | undefined)?.reason)}`;
      }
      expect(refusals).toEqual({
        'ops-gus': '403 requester_cannot_approve',
        'eng-lou': '403 not_a_change_owner',
        'ops-ida': '403 not_a_change_owner',
      });
      const tampered = await decide(s, 'own-kim', approvalId, { ...body, actionDigest: 'f'.repeat(64) });
      expect(tampered.status).toBe(409);
      expect(await cancelCalls(operationKey)).toEqual([]);
      expect((await decide(s, 'own-kim', approvalId, body)).status).toBe(200);

      // Duplicate delivery: two executions at once and the command again — one cancel.
      const [a, b] = await Promise.all([executeChangeCancel(deps, operationKey), executeChangeCancel(deps, operationKey)]);
      console.log('concurrent:', JSON.stringify([a, b]));
      expect([a.state, b.state].filter((x) => x === 'cancelled').length).toBeGreaterThanOrEqual(1);
      const again = await cliOut(['change', 'cancel', operationKey]);
      expect(again).toMatch(/cancelled before its window \(approved by own-kim\) — already done/);
      expect((await cancelCalls(operationKey)).filter(([st, reason]) => st === 200 && reason === null)).toHaveLength(1);

      const readBack = await call('GET', `${s.url('staging')}/changes/operations/${encodeURIComponent(operationKey)}`, null);
      expect(readBack.body).toMatchObject({ status: 'cancelled', cancelledBy: 'own-kim' });
      expect(await scheduleStatus(operationKey)).toBe('compensated');
      const approval = await s.db.db
        .selectFrom('approvals')
        .select(['status', 'approver'])
        .where('id', '=', approvalId)
        .executeTakeFirstOrThrow();
      expect(approval).toEqual({ status: 'used', approver: 'own-kim' });
      // The cancel's own run completed, and said so like every run that completes (ADR 0755): once.
      const run = await s.db.db
        .selectFrom('approvals as p')
        .innerJoin('workflows as w', 'w.id', 'p.workflow_id')
        .select(['w.id', 'w.state'])
        .where('p.id', '=', approvalId)
        .executeTakeFirstOrThrow();
      expect(run.state).toBe('completed');
      const completed = await sql<{ service: string; outcome: string; actor: string }>`select event->>'service' as service,
        event->>'outcome' as outcome, event->>'actorHash' as actor from
        (select event from audit_log union all select event from audit_outbox) e
      where event->>'type' = 'run.completed' and event->>'runId' = ${run.id}`.execute(s.db.db);
      expect(completed.rows).toEqual([{ service: 'reconciliation', outcome: 'reconciled', actor: actorHash(deps.hmacKey, 'own-kim') }]);
      // Sent again by its approver (a lost answer): replayed, nothing recorded (ADR 0726); the other decision is refused.
      expect(await decide(s, 'own-kim', approvalId, body)).toMatchObject({ status: 200, body: { status: 'approved', replayed: true } });
      expect((await decide(s, 'own-kim', approvalId, { ...body, decision: 'deny' })).status).toBe(410);
      const audit = await sql<{ type: string }>`select event->>'type' as type from
        (select event from audit_log union all select event from audit_outbox) e
      where event->>'tool' = 'cancel_change'`.execute(s.db.db);
      expect(audit.rows.map((r) => r.type)).toEqual(
        expect.arrayContaining([
          'approval.requested',
          'compensation.requested',
          'approval.decided',
          'approval.consumed',
          'operation.succeeded',
        ]),
      );
      // A compensated step cannot be cancelled twice.
      expect(await cliOut(['change', 'cancel', operationKey, '--reason', 'again'])).toMatch(/cancelled before its window|not_scheduled/);
    },
  );

  it('after the window started: refused with a terminal state and a next step; the change stands', { timeout: 600_000 }, async () => {
    const { operationKey } = await scheduled('CX-2', 'Please schedule change CHG-102 in the manual window.');
    const asked = await cliOut(['change', 'cancel', operationKey, '--reason', 'not needed any more']);
    const approvalId = approvalIdIn(asked);
    const shown = await getApproval(s, 'own-kim', approvalId);
    const ok = await decide(s, 'own-kim', approvalId, {
      decision: 'approve',
      actionVersion: shown.body.actionVersion,
      actionDigest: shown.body.actionDigest,
    });
    expect(ok.status).toBe(200);
    // The window opens before the cancel runs.
    expect(
      (await call('POST', `${s.url('staging')}/changes/operations/${encodeURIComponent(operationKey)}/window-start`, null, {})).status,
    ).toBe(200);
    const late = await cliOut(['change', 'cancel', operationKey]);
    console.log('late:', late.trim());
    expect(late).toMatch(/refused \(409:window_started\)\. Next step: The window of .* started before the cancel ran/);
    expect(await cancelCalls(operationKey)).toEqual([[409, 'window_started']]);
    const cancelWf = await s.db.db
      .selectFrom('workflows')
      .select(['state', 'stop_reason', 'next_step'])
      .where('ticket_id', '=', cancelTicketId(`cancel:${operationKey}`))
      .executeTakeFirstOrThrow();
    expect(cancelWf).toMatchObject({ state: 'stopped', stop_reason: 'denied' });
    expect(cancelWf.next_step).toMatch(/roll it back under the change's own plan/);
    expect(await scheduleStatus(operationKey)).toBe('succeeded');
    const readBack = await call('GET', `${s.url('staging')}/changes/operations/${encodeURIComponent(operationKey)}`, null);
    expect(readBack.body.status).toBe('started');
    // Running it again changes nothing and sends nothing.
    expect(await cliOut(['change', 'cancel', operationKey])).toMatch(/refused/);
    expect(await cancelCalls(operationKey)).toHaveLength(1);
  });

  it(
    'control removed (GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL): the cancel runs with no change owner — the approval is what stops it',
    { timeout: 600_000 },
    async () => {
      const { operationKey } = await scheduled('CX-3', 'Please schedule change CHG-101 in the manual window.');
      await cliOut(['change', 'cancel', operationKey, '--reason', 'unilateral']);
      process.env.GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL = '1';
      resetTestFaultsForTests();
      try {
        const out = await cliOut(['change', 'cancel', operationKey]);
        console.log('control removed:', out.trim());
        expect(out).toMatch(/cancelled before its window/);
      } finally {
        delete process.env.GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL;
        resetTestFaultsForTests();
      }
      expect((await call('GET', `${s.url('staging')}/changes/operations/${encodeURIComponent(operationKey)}`, null)).body.status).toBe(
        'cancelled',
      );
    },
  );

  it(
    'audit storage unavailable: the approved cancel is held (exit 4), its approval left unused and nothing sent; once audit is back it runs once',
    { timeout: 600_000 },
    async () => {
      const { operationKey } = await scheduled('CX-4', 'Please schedule change CHG-101 in the next maintenance window.');
      const approvalId = approvalIdIn(await cliOut(['change', 'cancel', operationKey, '--reason', 'postpone']));
      const shown = await getApproval(s, 'own-kim', approvalId);
      const body = { decision: 'approve', actionVersion: shown.body.actionVersion, actionDigest: shown.body.actionDigest };
      expect((await decide(s, 'own-kim', approvalId, body)).status).toBe(200);
      const gate = { AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '1500' };
      const heartbeatOlderThan = (seconds: number) => auditHeartbeatOlderThan(s.db.db, seconds);
      await s.stack.kill('audit', 'SIGKILL', { keepDown: true });
      try {
        await waitUntil(() => heartbeatOlderThan(2), 'the audit heartbeat to go stale');
        const held = await cliOut(['change', 'cancel', operationKey], 'ops-gus', gate);
        console.log('held:', held.trim());
        expect(held).toMatch(
          /audit storage is unavailable \(audit heartbeat \d+ ms old\): nothing was sent and the approval is left unused/,
        );
        expect(held).toMatch(/exit 4$/);
        expect(await cancelCalls(operationKey)).toEqual([]);
        const approval = await s.db.db.selectFrom('approvals').select('status').where('id', '=', approvalId).executeTakeFirstOrThrow();
        expect(approval.status).toBe('approved');
      } finally {
        await s.stack.restart('audit');
      }
      await waitUntil(async () => !(await heartbeatOlderThan(1)), 'a fresh audit heartbeat', 120_000);
      expect(await cliOut(['change', 'cancel', operationKey], 'ops-gus', gate)).toMatch(
        /cancelled before its window \(approved by own-kim\)/,
      );
      expect((await cancelCalls(operationKey)).filter(([st, reason]) => st === 200 && reason === null)).toHaveLength(1);
    },
  );
});
