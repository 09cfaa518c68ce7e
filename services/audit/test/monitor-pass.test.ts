import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { resetTestFaultsForTests } from '@gatehouse/contracts';
import { createDb, type Db } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { claimMonitorPass } from '../src/domain/monitor-pass.ts';

// ADR 0400: N audit replicas run one monitor pass per interval between them. Two replicas, each
// on its own connection pool, claim the same pass behind a barrier; exactly one may run it.

const TRIALS = 60;
let t: TestDatabase;
let other: Db;

beforeAll(async () => {
  t = await createTestDatabase();
  other = createDb(t.url, 2);
});
afterAll(async () => {
  await other?.destroy();
  await t?.drop();
});
const env = process.env.GATEHOUSE_ENV;
afterEach(() => {
  delete process.env.GATEHOUSE_TEST_EVERY_REPLICA_MONITORS;
  process.env.GATEHOUSE_ENV = env;
  resetTestFaultsForTests();
});

const lastPassLongAgo = () => sql`UPDATE monitor_passes SET started_at = 'epoch', replica = NULL WHERE id = 1`.execute(t.db);

/** Both replicas claim the pass at once (released by one barrier); returns how many may run it. */
async function race(): Promise<number> {
  await lastPassLongAgo();
  let open!: () => void;
  const barrier = new Promise<void>((r) => (open = r));
  const claims = [
    barrier.then(() => claimMonitorPass(t.db, 'audit-a', 30_000)),
    barrier.then(() => claimMonitorPass(other, 'audit-b', 30_000)),
  ];
  open();
  return (await Promise.all(claims)).filter(Boolean).length;
}

describe('one monitor pass per interval across audit replicas', () => {
  it(`two replicas claiming the same pass at once: exactly one runs it (× ${TRIALS})`, async () => {
    const winners: number[] = [];
    for (let i = 0; i < TRIALS; i++) winners.push(await race());
    expect(winners.every((n) => n === 1)).toBe(true);
  });

  it('the next pass waits for 0.9 × the interval since the last began, then another replica may take it', async () => {
    await lastPassLongAgo();
    // 3 s, so the two refusals fall inside 0.9 × the interval even on a loaded machine.
    expect(await claimMonitorPass(t.db, 'audit-a', 3000)).toBe(true);
    expect(await claimMonitorPass(other, 'audit-b', 3000)).toBe(false);
    expect(await claimMonitorPass(t.db, 'audit-a', 3000)).toBe(false);
    await new Promise((r) => setTimeout(r, 3000));
    expect(await claimMonitorPass(other, 'audit-b', 3000)).toBe(true);
    const row = await t.db.selectFrom('monitor_passes').selectAll().executeTakeFirstOrThrow();
    expect(row.replica).toBe('audit-b');
  });

  it('a missing row (a restore without it) is written again by the next claim: the monitors never go silent', async () => {
    await sql`DELETE FROM monitor_passes`.execute(t.db);
    expect(await claimMonitorPass(t.db, 'audit-a', 30_000)).toBe(true);
    expect(await claimMonitorPass(other, 'audit-b', 30_000)).toBe(false);
  });

  it('control removed (GATEHOUSE_TEST_EVERY_REPLICA_MONITORS=1): both replicas run the same pass', async () => {
    process.env.GATEHOUSE_ENV = 'test';
    process.env.GATEHOUSE_TEST_EVERY_REPLICA_MONITORS = '1';
    resetTestFaultsForTests();
    expect(await race()).toBe(2);
  });
});
