import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadReleaseManifest } from '@gatehouse/contracts';
import { registerRelease } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { processTurn } from '../src/jobs/turns.processor.ts';
import { messageModel, submittedRun, turnDeps } from './support/turn-run.ts';

// A run that completes while its release's consequential writes are off (a candidate before
// `enable-writes`, or a release a rollback restored) was offered only its read tools: it is marked
// `writes_withheld`, which the canary analysis leaves out of its quality measures (ADR 0724). An
// investigate run, or an act run with writes on, is not marked.

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
  // rel-1 active with writes on (the first release registered); rel-2 a candidate with writes off.
  await registerRelease(t.db, 'rel-1', loadReleaseManifest('rel-1') as unknown as Record<string, unknown>);
  await registerRelease(t.db, 'rel-2', loadReleaseManifest('rel-2') as unknown as Record<string, unknown>);
});
afterAll(async () => {
  await t?.drop();
});

async function completed(o: { mode: 'investigate' | 'act'; release: string }) {
  const id = await submittedRun(t.db, o);
  const model = messageModel('Order O-1001 is on its way.');
  expect(await processTurn({ release: o.release, workflowId: id, round: 1 }, turnDeps(t.db, model.client))).toBe('recorded');
  expect(model.requests()).toBe(1);
  return t.db.selectFrom('workflows').select(['state', 'writes_withheld', 'next_step']).where('id', '=', id).executeTakeFirstOrThrow();
}

describe('a run completed with its writes withheld', () => {
  it('an act run of a release whose writes are off is marked, and told so', async () => {
    const w = await completed({ mode: 'act', release: 'rel-2' });
    expect(w).toMatchObject({ state: 'completed', writes_withheld: true });
    expect(w.next_step).toMatch(/^Consequential writes are not enabled yet for release rel-2/);
  });

  it('a canary candidate is named as one, never as a rollback; a release a rollback restored with writes off is', async () => {
    const canary = await completed({ mode: 'act', release: 'rel-2' });
    expect(canary.next_step).toContain('canary');
    expect(canary.next_step).toContain('gatehouse release enable-writes rel-2');
    expect(canary.next_step).not.toContain('rollback');
    await t.db.updateTable('releases').set({ writes_enabled: false }).where('id', '=', 'rel-1').execute();
    try {
      const restored = await completed({ mode: 'act', release: 'rel-1' });
      expect(restored).toMatchObject({ writes_withheld: true });
      expect(restored.next_step).toContain('rollback');
      expect(restored.next_step).not.toContain('canary');
    } finally {
      await t.db.updateTable('releases').set({ writes_enabled: true }).where('id', '=', 'rel-1').execute();
    }
  });

  it('an investigate run of the same release is not (it needed no write)', async () => {
    expect(await completed({ mode: 'investigate', release: 'rel-2' })).toMatchObject({ state: 'completed', writes_withheld: false });
  });

  it('an act run of a release with writes on is not', async () => {
    expect(await completed({ mode: 'act', release: 'rel-1' })).toMatchObject({ state: 'completed', writes_withheld: false });
  });
});
