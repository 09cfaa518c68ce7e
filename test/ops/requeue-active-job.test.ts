import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job, Worker } from 'bullmq';
import { queueName, turnsQueue, type TurnJob } from '@gatehouse/contracts';
import { enqueueInTransaction, inTransaction } from '@gatehouse/ledger';
import { createLogger, createWorker, OutboxRelay, PostgresGate } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';
import { watchdogPass, type WatchdogDeps } from '@gatehouse/executor';
import { activateRelease, quarantineRelease, requeueRelease, rollbackRelease } from '@gatehouse/operations';
import { useReleaseSuite } from '../support/release-suite.ts';

// `gatehouse queues requeue --from C --to F` while a job of C is still running (a drain lets
// in-flight work finish): the run that job belongs to must not be left waiting on nothing. The
// job finishes after the requeue and writes its run's next job; the run must still end — on F,
// driven by F's workers and, where its next job landed on C's drained queue, by the watchdog that
// re-drives from the ledger with the same deterministic job id (docs/decisions/0100,
// docs/decisions/0673-a-requeue-moves-every-live-run.md).
//
// The agent loop is stood in for by a turn handler with its shape: it reads the run before the
// model call, then, in one transaction that locks the run, records the round and enqueues the
// next turn on the release it read (round 2 ends the run). On C, round 1 waits at a barrier.
// Every third round on-call also quarantines what is left on C before the watchdogs run.

const HMAC = 'test-audit-hmac-key-0123456789';
const op = { operator: 'ops-gus', hmacKey: HMAC };
const log = createLogger('test');
const t = useReleaseSuite();
const workers: Worker[] = [];
let relay: OutboxRelay;

/** A run held at the barrier: `entered` resolves once its job is active, `open()` lets it finish. */
interface Barrier {
  entered: Promise<void>;
  open: () => void;
  wait: () => Promise<void>;
}

function barrier(): Barrier {
  let enter!: () => void;
  let open!: () => void;
  const entered = new Promise<void>((r) => (enter = r));
  const opened = new Promise<void>((r) => (open = r));
  return { entered, open, wait: () => (enter(), opened) };
}

const held = new Map<string, Barrier>();

/** The stand-in turn handler of `release` (see the file's comment). */
function turnHandler(release: string) {
  return async (job: TurnJob): Promise<void> => {
    const wf = await t.db.selectFrom('workflows').select('release_id').where('id', '=', job.workflowId).executeTakeFirstOrThrow();
    if (release === 'rel-2' && job.round === 1) await held.get(job.workflowId)?.wait();
    const rows = await inTransaction(t.db, async (trx) => {
      const locked = await trx
        .selectFrom('workflows')
        .select(['round', 'state'])
        .where('id', '=', job.workflowId)
        .forUpdate()
        .executeTakeFirstOrThrow();
      if (locked.round >= job.round || locked.state === 'completed') return []; // a repeat: the ledger has it
      const done = job.round >= 2;
      await trx
        .updateTable('workflows')
        .set({ round: job.round, updated_at: new Date(), ...(done ? { state: 'completed' as const } : {}) })
        .where('id', '=', job.workflowId)
        .execute();
      if (done) return [];
      return [await enqueueInTransaction(trx, turnsQueue, { release: wf.release_id, workflowId: job.workflowId, round: job.round + 1 })];
    });
    await relay.publish(rows);
  };
}

function startTurnWorker(release: string): void {
  const gate = new PostgresGate(t.db, log);
  const handler = turnHandler(release);
  workers.push(
    createWorker(turnsQueue, (payload: TurnJob, _job: Job) => handler(payload), {
      release,
      prefix: t.prefix,
      redisUrl: TEST_REDIS_URL,
      log,
      gate,
    }),
  );
}

/** A live run of `release` waiting for its first turn, that turn published to its queue. */
async function runWaitingForTurn(release: string, n: number): Promise<string> {
  const a = await createAction(t.db, { orderId: `O-${3000 + n}`, release, decision: 'ALLOW', approved: false });
  const rows = await inTransaction(t.db, async (trx) => [
    await enqueueInTransaction(trx, turnsQueue, { release, workflowId: a.workflowId, round: 1 }),
  ]);
  await relay.publish(rows);
  return a.workflowId;
}

const watchdog = (release: string): WatchdogDeps => ({
  db: t.db,
  queues: t.queues,
  relay,
  log,
  settings: { release, graceMs: 0, maxRedrives: 5, redisTimeoutMs: 2000, batch: 200 },
});

const stateOf = async (id: string): Promise<string> =>
  (await t.db.selectFrom('workflows').select('state').where('id', '=', id).executeTakeFirstOrThrow()).state;

/** Runs both releases' watchdogs until every run of `ids` completed, or `ms` passed. */
async function untilCompleted(ids: string[], ms: number): Promise<string[]> {
  for (const until = Date.now() + ms; Date.now() < until;) {
    const states = await Promise.all(ids.map(stateOf));
    if (states.every((s) => s === 'completed')) return states;
    for (const release of ['rel-1', 'rel-2']) await watchdogPass(watchdog(release));
    await new Promise((r) => setTimeout(r, 250));
  }
  return Promise.all(ids.map(stateOf));
}

beforeAll(async () => {
  relay = new OutboxRelay(t.db, t.queues, log);
  t.dirs.writeRelease('rel-1');
  t.dirs.writeRelease('rel-2', (m) => (m.description = 'candidate'));
  await activateRelease(t.db, 'rel-1', op);
  await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
  // On-call rolled the candidate back: rel-2 is retired and drained (its queues paused).
  await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'canary denials doubled', ...op });
  startTurnWorker('rel-1');
  startTurnWorker('rel-2');
});
afterAll(async () => {
  for (const b of held.values()) b.open(); // none is left waiting when a round failed
  await Promise.all(workers.map((w) => w.close()));
});

describe('queues requeue while a job of the drained release is running', () => {
  it.each([0, 1, 2, 3, 4, 5])(
    'every run ends on the former release (round %i)',
    async (i) => {
      const turns2 = t.queues.get(queueName('turns', 'rel-2'));
      // A run whose first turn a rel-2 worker took before the drain: let the queue go just long
      // enough for the worker to take it, and hold it active at the barrier.
      const b = barrier();
      const active = await runWaitingForTurn('rel-2', 10 * i);
      held.set(active, b);
      await turns2.resume();
      await b.entered;
      await turns2.pause();
      // A run whose first turn is still queued on the drained release.
      const queued = await runWaitingForTurn('rel-2', 10 * i + 1);

      // The barrier opens after the requeue, or while it runs (the running job commits its next turn
      // before, during or after the requeue's move).
      const requeue = requeueRelease(t.db, t.queues, 'rel-2', 'rel-1', op);
      if (i % 2 === 1) b.open();
      expect((await requeue).moved).toBeGreaterThanOrEqual(1);
      b.open();
      for (const until = Date.now() + 20_000; (await turns2.getJobState(`turn_${active}_r1`)) !== 'completed' && Date.now() < until;)
        await new Promise((r) => setTimeout(r, 50));
      expect(await turns2.getJobState(`turn_${active}_r1`)).toBe('completed');
      if (i % 3 === 2) {
        // On-call sets aside what is left on the drained release: the next turn the running job
        // wrote there goes to quarantined_jobs, and its run, moved to rel-1, is not stopped.
        expect((await quarantineRelease(t.db, t.queues, 'rel-2', op)).jobs).toBeGreaterThanOrEqual(1);
        expect(await stateOf(active)).toBe('executing');
      }

      expect(await untilCompleted([active, queued], 20_000)).toEqual(['completed', 'completed']);
    },
    90_000,
  );
});

// ADR 0699: the runs a requeue moves off a drained release waited there for on-call, not for
// their own work: their wall-time budgets are credited from the drain's start (or their
// submission, if later) before they move, or their next step found the deadline passed and
// stopped them `budget_exhausted` having done nothing.
describe('queues requeue credits the wait on the drained release', () => {
  it('a run queued on the drained release ten minutes, past its deadline, gets the drain back', async () => {
    const id = await runWaitingForTurn('rel-2', 900);
    await t.db
      .updateTable('releases')
      .set({ draining_since: new Date(Date.now() - 600_000) })
      .where('id', '=', 'rel-2')
      .execute();
    await t.db
      .updateTable('workflows')
      .set({ created_at: new Date(Date.now() - 600_000) })
      .where('id', '=', id)
      .execute();
    await t.db
      .updateTable('budgets')
      .set({ deadline_at: new Date(Date.now() - 480_000) })
      .where('workflow_id', '=', id)
      .execute();

    expect((await requeueRelease(t.db, t.queues, 'rel-2', 'rel-1', op)).moved).toBeGreaterThanOrEqual(1);
    const b = await t.db.selectFrom('budgets').select('deadline_at').where('workflow_id', '=', id).executeTakeFirstOrThrow();
    // 2 min of its own wall time were left when the drain began; they are left again.
    expect(new Date(b.deadline_at).getTime()).toBeGreaterThan(Date.now() + 100_000);
    expect(await untilCompleted([id], 20_000)).toEqual(['completed']);
  }, 60_000);
});
