import { execFile } from 'node:child_process';
import { resolve as resolvePath } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { cleanNeeded, failureBound } from '@gatehouse/operations';
import {
  cli,
  decide,
  fc,
  fixtures,
  getApproval,
  msg,
  refunds,
  settled,
  stagingRequests,
  startHuntStack,
  submit,
  tokenFor,
  SECRET,
  waitFor,
  type HuntStack,
} from '../hard-cases/helpers.ts';

// Staged re-enable after containment (docs/decisions/0310-staged-reenable.md,
// docs/runbooks/reenable.md): read_only → cohort → everyone, each stage's clean executions n and
// the 95 % bound 1 − 0.05^(1/n) before the next. Enforced at execution, in the executor's
// containment step. `on` is the designed system; `off` runs with GATEHOUSE_TEST_DISABLE_REENABLE_COHORT
// (a cohort stage admits everyone), where the cohort case fails.

let on: HuntStack;
let off: HuntStack;
beforeAll(async () => {
  [on, off] = await Promise.all([startHuntStack(), startHuntStack({ GATEHOUSE_TEST_DISABLE_REENABLE_COHORT: '1' })]);
}, 400_000);
afterAll(async () => {
  await Promise.all([on?.close(), off?.close()]);
});

/** Runs the real CLI as `as` (default ops-gus); resolves with the exit code and output, never throws. */
function gatehouse(s: HuntStack, args: string[], as = 'ops-gus'): Promise<{ code: number; out: string; err: string }> {
  return tokenFor(as, SECRET).then(
    (token) =>
      new Promise((done) => {
        execFile(
          process.execPath,
          [resolvePath(repoRoot, 'apps/cli/src/main.ts'), ...args],
          { cwd: repoRoot, env: { ...process.env, ...s.env, LOG_LEVEL: 'warn', GATEHOUSE_TOKEN: token }, timeout: 120_000 },
          (err, out, errOut) => done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out, err: errOut }),
        );
      }),
  );
}

/** POSTs the payments ledger received for `orderId` (the downstream calls). */
async function paymentPosts(s: HuntStack, orderId: string): Promise<Array<Record<string, unknown>>> {
  return (await stagingRequests(s, `?orderId=${orderId}&target=payments`)).filter((r) => r.method === 'POST');
}

/** A 10.00 refund (below the auto limit) by `user` on `orderId`, waited on until it is paused or settled. */
async function refund(s: HuntStack, user: string, ticketId: string, orderId: string) {
  await fixtures(s, ticketId, [fc(['issue_refund', { orderId, amount: '10.00', reason: 'late' }]), msg()]);
  const { token, workflowId } = await submit(s, user, ticketId, `refund 10 on ${orderId}`);
  const v = await waitFor(s, token, workflowId, (x) => settled(x) && x.actions.length === 1);
  return { token, workflowId, state: v.state, nextStep: v.nextStep };
}

/** Contains issue_refund and starts its re-enable (read_only), then enters the cohort tenant:northwind with `--max-bound 1`. */
async function toCohortStage(s: HuntStack): Promise<void> {
  await cli(s, ['switch', 'off', 'issue_refund']);
  await cli(s, ['epoch', 'bump']);
  await cli(s, ['reenable', 'advance', 'issue_refund', '--reason', 'incident 42 contained']);
  await cli(s, ['reenable', 'advance', 'issue_refund', '--cohort', 'tenant:northwind', '--max-bound', '1', '--reason', 'northwind first']);
}

describe('the bound', () => {
  it('1 − 0.05^(1/n): n = 0 gives 1, n = 59 about 0.0495; a 5 % bound needs 59 clean executions', () => {
    expect(failureBound(0)).toBe(1);
    expect(failureBound(59)).toBeCloseTo(0.0495, 4);
    expect(failureBound(58)).toBeGreaterThan(0.05);
    expect(cleanNeeded(0.05)).toBe(59);
    expect(cleanNeeded(1)).toBe(0);
    expect(failureBound(cleanNeeded(0.2))).toBeLessThanOrEqual(0.2);
    expect(failureBound(cleanNeeded(0.2) - 1)).toBeGreaterThan(0.2);
  });
});

describe('staged re-enable (designed)', () => {
  it('read_only holds the tool; cohort lets only the cohort through (zero payment calls for others); everyone resumes the held work', async () => {
    expect((await gatehouse(on, ['reenable', 'advance', 'issue_refund', '--reason', 'x'])).code, 'not contained: refused').toBe(1);
    await cli(on, ['switch', 'off', 'issue_refund']);
    await cli(on, ['epoch', 'bump']);
    expect(await cli(on, ['reenable', 'status'])).toMatch(/issue_refund: off/);
    expect(await cli(on, ['reenable', 'advance', 'issue_refund', '--reason', 'incident 42 contained'])).toMatch(/stage read_only/);
    const sw = await gatehouse(on, ['switch', 'on', 'issue_refund']);
    expect(sw.code, 'switch on is refused while a staged re-enable is open').toBe(1);
    expect(sw.err).toMatch(/reenable advance issue_refund/);

    // read_only: both tenants' refunds are held.
    const ana = await refund(on, 'rep-ana', 'R-ana-1', 'O-1006');
    const ivy = await refund(on, 'rep-ivy', 'R-ivy-1', 'N-2001');
    expect([ana.state, ivy.state]).toEqual(['paused', 'paused']);

    // Advancing without evidence is refused (n = 0, bound 1), with what it needs.
    const refused = await gatehouse(on, [
      'reenable',
      'advance',
      'issue_refund',
      '--cohort',
      'tenant:northwind',
      '--reason',
      'northwind first',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/0 clean execution\(s\), bound 1\.0000 > --max-bound 0\.05: it needs 59/);

    // A denied override ends its own run with the command that asks again (not a release's).
    const first = /override ([0-9a-f-]{36})/.exec(
      await cli(on, ['reenable', 'override', 'issue_refund', '--cohort', 'tenant:northwind', '--reason', 'first ask']),
    )![1]!;
    const firstShown = await getApproval(on, 'ops-ida', first);
    const deny = { decision: 'deny', actionVersion: firstShown.body.actionVersion, actionDigest: firstShown.body.actionDigest };
    expect((await decide(on, 'ops-ida', first, deny)).status).toBe(200);
    const ended = await on.db.db
      .selectFrom('workflows')
      .select(['state', 'next_step'])
      .where(
        'id',
        '=',
        (await on.db.db.selectFrom('approvals').select('workflow_id').where('id', '=', first).executeTakeFirstOrThrow()).workflow_id,
      )
      .executeTakeFirstOrThrow();
    expect(ended).toMatchObject({ state: 'stopped' });
    expect(ended.next_step).toContain('ask again with gatehouse reenable override issue_refund');

    // A second operator's override, bound to this stage, cohort and n.
    const asked = await cli(on, [
      'reenable',
      'override',
      'issue_refund',
      '--cohort',
      'tenant:northwind',
      '--reason',
      'quiet tenant, ops call',
    ]);
    const id = /override ([0-9a-f-]{36})/.exec(asked)![1]!;
    // Decided through the approval service like every override (ADR 0230): never by its requester.
    const shown = await getApproval(on, 'ops-ida', id);
    expect(shown.body).toMatchObject({ tool: 'release_override' });
    const decision = { decision: 'approve', actionVersion: shown.body.actionVersion, actionDigest: shown.body.actionDigest };
    expect((await decide(on, 'ops-gus', id, decision)).status, 'the requester cannot approve').toBe(403);
    expect((await decide(on, 'lead-eli', id, decision)).status, 'a support lead cannot approve').toBe(403);
    expect((await decide(on, 'ops-ida', id, decision)).status).toBe(200);
    expect(await cli(on, ['reenable', 'advance', 'issue_refund', '--cohort', 'tenant:northwind', '--reason', 'northwind first'])).toMatch(
      new RegExp(`stage cohort on n=0 clean .* with override ${id}; 1 held action\\(s\\) released`),
    );

    // cohort: northwind's held refund runs; quillfeather's stays held, and a new one is held too.
    await waitFor(on, ivy.token, ivy.workflowId, (x) => x.state === 'completed');
    expect(await refunds(on, 'N-2001')).toHaveLength(1);
    const ana2 = await refund(on, 'rep-ana', 'R-ana-2', 'O-1008');
    expect(ana2.state).toBe('paused');
    expect(ana2.nextStep).toMatch(/re-enabled for a cohort only/);
    expect(await paymentPosts(on, 'O-1006')).toEqual([]);
    expect(await paymentPosts(on, 'O-1008')).toEqual([]);

    const status = JSON.parse(await cli(on, ['reenable', 'status', 'issue_refund', '--json'])) as {
      tools: Array<{ stage: string; cohort: unknown; evidence: { n: number; failures: number; bound: number } }>;
    };
    expect(status.tools[0]).toMatchObject({ stage: 'cohort', cohort: { tenants: ['northwind'], users: [] } });
    expect(status.tools[0]!.evidence).toMatchObject({ n: 1, failures: 0 });
    expect(status.tools[0]!.evidence.bound).toBeCloseTo(0.95, 6);

    // everyone: refused at the default bound, allowed when n = 1 meets the asked bound; held work resumes.
    expect((await gatehouse(on, ['reenable', 'advance', 'issue_refund', '--reason', 'all'])).code).toBe(1);
    expect(await cli(on, ['reenable', 'advance', 'issue_refund', '--max-bound', '0.96', '--reason', 'all'])).toMatch(
      /stage everyone on n=1 clean .*2 held action\(s\) released/,
    );
    await waitFor(on, ana.token, ana.workflowId, (x) => x.state === 'completed');
    await waitFor(on, ana2.token, ana2.workflowId, (x) => x.state === 'completed');
    expect(await refunds(on, 'O-1006')).toHaveLength(1);
    expect(await refunds(on, 'O-1008')).toHaveLength(1);
    expect(await cli(on, ['reenable', 'status'])).toMatch(/no tool is contained/);
    const stages = await on.db.db
      .selectFrom('tool_reenable_stages')
      .select(['stage', 'ended_at', 'override_id'])
      .orderBy('started_at')
      .execute();
    expect(stages.map((x) => [x.stage, x.ended_at !== null, x.override_id !== null])).toEqual([
      ['read_only', true, false],
      ['cohort', true, true],
      ['everyone', true, false],
    ]);
  }, 600_000);
});

describe('control removed (GATEHOUSE_TEST_DISABLE_REENABLE_COHORT)', () => {
  it('designed: at the cohort stage a non-cohort tenant is held — zero payment calls', async () => {
    await toCohortStage(on);
    try {
      const ana = await refund(on, 'rep-ana', 'R-ctl-on', 'O-1007');
      expect(ana.state).toBe('paused');
      expect(await paymentPosts(on, 'O-1007')).toEqual([]);
    } finally {
      await cli(on, ['reenable', 'advance', 'issue_refund', '--max-bound', '1', '--reason', 'cleanup']);
    }
  });

  it('removed: the non-cohort tenant is paid while only northwind should be', async () => {
    await toCohortStage(off);
    const ana = await refund(off, 'rep-ana', 'R-ctl-off', 'O-1007');
    expect(ana.state).toBe('completed');
    expect(await paymentPosts(off, 'O-1007')).not.toEqual([]);
    expect(await refunds(off, 'O-1007')).toHaveLength(1);
  });
});
