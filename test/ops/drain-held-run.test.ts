import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { QueueRegistry } from '@gatehouse/platform';
import { drainRelease, resumeRelease } from '@gatehouse/operations';
import { workflowOverview } from '@gatehouse/ops';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';
import {
  fixtures,
  modelRequests,
  msg,
  settled,
  sleep,
  startHuntStack,
  submit,
  view,
  waitFor,
  type HuntStack,
} from '../hard-cases/helpers.ts';

// docs/decisions/0480-drain-held-by-the-ledger.md: a run of a drained release is held — its jobs
// wait, nothing downstream is called — and GET /v1/workflows/:id says so and names what lets it
// go on (docs/product/invariants.md#bounds: a run that waits shows a human-readable next step).

const op = { operator: 'ops-gus', hmacKey: 'test-audit-hmac-key-0123456789' };
let s: HuntStack;
let redis: Redis;
let queues: QueueRegistry;

beforeAll(async () => {
  s = await startHuntStack();
  redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  queues = new QueueRegistry(redis, s.prefix);
});
afterAll(async () => {
  await queues?.close();
  redis?.disconnect();
  await s?.close();
});

describe('a run held by a drain', () => {
  it('waits without calling the model, shows why and what to run, and completes after queues resume', async () => {
    await fixtures(s, 'D-held', [msg('All good.')]);
    await drainRelease(s.db.db, queues, 'rel-1', op);
    const { token, workflowId } = await submit(s, 'rep-ana', 'D-held', 'What is the status of order O-1001?', 'investigate');
    await sleep(3000);
    const held = await view(s, token, workflowId);
    expect(held.state).toBe('received');
    expect(held.nextStep).toMatch(/^Held: on-call is draining release rel-1; .*gatehouse queues resume --release rel-1/);
    expect((await modelRequests(s, 'D-held')).requests).toHaveLength(0);
    // The ops dashboard's list says the same.
    const listed = (await workflowOverview(s.db.db, { limit: 50 })).recent.find((w) => w.id === workflowId);
    expect(listed?.nextStep).toBe(held.nextStep);

    await resumeRelease(s.db.db, queues, 'rel-1', op);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(end.finalMessage).toBe('All good.');
    expect(end.nextStep).not.toMatch(/Held/);
  }, 120_000);

  // ADR 0699: the hold is on-call's wait, not the run's work. A run held past its wall-time budget
  // used to stop `budget_exhausted` at round 0 on resume, its ticket lost with nothing done.
  it('held past its wall-time budget, it is credited the drain and completes after queues resume', async () => {
    await fixtures(s, 'D-long', [msg('Still fine.')]);
    await drainRelease(s.db.db, queues, 'rel-1', op);
    const { token, workflowId } = await submit(s, 'rep-ana', 'D-long', 'What is the status of order O-1001?', 'investigate');
    await sleep(1000);
    // Ten minutes of drain, in the ledger's terms: the drain and the run began then, and the run's
    // own deadline (submission + its wall time) has long passed.
    const db = s.db.db;
    await sql`UPDATE releases SET draining_since = now() - interval '10 minutes' WHERE id = 'rel-1'`.execute(db);
    await sql`UPDATE workflows SET created_at = now() - interval '10 minutes' WHERE id = ${workflowId}`.execute(db);
    await sql`UPDATE budgets SET deadline_at = now() - interval '8 minutes' WHERE workflow_id = ${workflowId}`.execute(db);
    expect((await view(s, token, workflowId)).state).toBe('received');

    await resumeRelease(s.db.db, queues, 'rel-1', op);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.stopReason).toBeNull();
    expect(end.state).toBe('completed');
    expect(end.finalMessage).toBe('Still fine.');
    const r = await db.selectFrom('releases').select(['draining', 'draining_since']).where('id', '=', 'rel-1').executeTakeFirstOrThrow();
    expect(r).toEqual({ draining: false, draining_since: null });
  }, 120_000);
});
