import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { call, tokenFor } from '@gatehouse/cli';
import { isConnectionFault, isTerminal, type WorkflowState } from '@gatehouse/ledger';
import { startPrivatePostgres, type PrivatePostgres } from '@gatehouse/test-harness';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';

// Every service process over a private Postgres cluster that the test restarts (pg_ctl restart
// -m fast) while tickets are in flight: no process exits, every service is ready again after the
// restart, and every ticket reaches a terminal state. With the client error handling switched off
// (GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING) the same restart kills the process.

const SECRET = 'local-auth-secret-change-me';
let pg: PrivatePostgres;
let s: E2EStack;

beforeAll(async () => {
  pg = await startPrivatePostgres();
  // Unsupervised: a service that dies must stay dead for the test to see it.
  s = await startE2EStack({}, { pgServer: pg.url, supervise: false });
});
afterAll(async () => {
  await s?.close();
  await pg?.destroy();
});

/** Waits for `cond` (polled every 200 ms) until `ms` pass. @throws Error naming `what`. */
async function waitFor<T>(what: string, cond: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    const v = await cond();
    if (v !== undefined) return v;
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Workflow states by id, read straight from the ledger; undefined while Postgres does not answer. */
async function states(ids: string[]): Promise<Record<string, WorkflowState> | undefined> {
  try {
    const rows = await s.db.db.selectFrom('workflows').select(['id', 'state']).where('id', 'in', ids).execute();
    return Object.fromEntries(rows.map((r) => [r.id, r.state]));
  } catch (err) {
    if (isConnectionFault(err)) return undefined;
    throw err;
  }
}

function exited(): Record<string, number | string> {
  const out: Record<string, number | string> = {};
  for (const [name, child] of s.stack.processes) {
    if (child.exitCode !== null || child.signalCode !== null) out[name] = child.exitCode ?? child.signalCode!;
  }
  return out;
}

async function allReady(): Promise<true | undefined> {
  for (const name of s.stack.processes.keys()) {
    const res = await fetch(`${s.url(name)}/readyz`, { signal: AbortSignal.timeout(3000) }).catch(() => null);
    if (!res?.ok) return undefined;
  }
  return true;
}

/** Submits three read tickets (`<prefix>-1…3`) as rep-ben; resolves with their workflow ids. */
async function submitReads(prefix: string): Promise<string[]> {
  const rep = await tokenFor('rep-ben', SECRET);
  const ids: string[] = [];
  for (let i = 1; i <= 3; i++) {
    const r = await call('POST', `${s.url('agent-loop')}/v1/tickets`, rep, {
      ticketId: `${prefix}-${i}`,
      text: 'What is the status of order O-1001?',
    });
    expect(r.status).toBe(202);
    ids.push(String(r.body.workflowId));
  }
  return ids;
}

/** Waits until every run of `ids` is terminal, expects each completed, every service ready and none exited. */
async function expectCompletedAndAlive(ids: string[]): Promise<void> {
  const final = await waitFor('terminal workflows', async () => {
    const st = await states(ids);
    return st && ids.every((id) => st[id] && isTerminal(st[id])) ? st : undefined;
  });
  expect(Object.values(final)).toEqual(ids.map(() => 'completed'));
  await waitFor('every service ready', allReady);
  expect(exited()).toEqual({});
}

describe('Postgres restarts under a running stack', () => {
  it('no service exits, /readyz names postgres while it is down, and tickets in flight finish', async () => {
    const ids = await submitReads('T-pg');
    await pg.restart({ mode: 'fast' });
    // Down for a while: readiness says what is missing, the processes stay.
    await pg.stop({ mode: 'fast' });
    const res = await fetch(`${s.url('policy-gateway')}/readyz`);
    expect(res.status).toBe(503);
    expect(Object.keys(((await res.json()) as { failing: Record<string, string> }).failing)).toEqual(['postgres']);
    await new Promise((r) => setTimeout(r, 3000)); // let the loops and workers meet the outage
    await pg.start();
    await pg.restart({ mode: 'fast' });

    await expectCompletedAndAlive(ids);
    // The ledger kept every job's attempts: nothing went to the dead letter for the outage.
    const stopped = await sql<{ n: number }>`SELECT count(*)::int AS n FROM workflows WHERE state = 'stopped'`.execute(s.db.db);
    expect(stopped.rows[0]?.n).toBe(0);
  });

  it('backend-termination waves on every service connection: no service exits, tickets in flight finish', async () => {
    const ids = await submitReads('T-wave');
    let terminated = 0;
    for (let wave = 0; wave < 10; wave++) {
      terminated += await pg.terminateBackends({ database: s.db.name });
      await new Promise((r) => setTimeout(r, 500)); // spacing of the waves, not an assertion
    }
    expect(terminated).toBeGreaterThan(0);
    await expectCompletedAndAlive(ids);
  });

  it('control removed: with GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING=1 a restart kills the service', async () => {
    await s.stack.restart('audit', { GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING: '1' });
    const audit = s.stack.processes.get('audit')!;
    // The audit loop holds a pooled client every 200 ms; a restart or two meets it.
    await waitFor(
      'audit to die',
      async () => {
        if (audit.exitCode !== null) return true;
        await pg.restart({ mode: 'fast' });
        return audit.exitCode !== null ? true : undefined;
      },
      60_000,
    );
    expect(audit.exitCode).not.toBe(0);
    expect(readFileSync(`${s.dir}/audit.log`, 'utf8')).toContain("Unhandled 'error' event");
    await s.stack.restart('audit', { GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING: undefined });
  });
});
