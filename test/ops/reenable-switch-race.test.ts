import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { advanceReenable, ReenableRefused, setSwitch, StagedReenableOpen } from '@gatehouse/operations';

// docs/decisions/0310-staged-reenable.md: `switch on` is refused while a stage is open, and every
// change of a tool's containment is one transaction. Concurrent `switch on|off` and
// `reenable advance` of one tool must serialize: never a switch on with a stage still open, never
// a deadlock between them (docs/decisions/0683-switch-off-serializes-with-the-claim.md).

const HMAC = 'test-audit-hmac-key-0123456789';
const TOOL = 'issue_refund';
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const advance = (cohort?: { tenants: string[]; users: string[] }) =>
  advanceReenable(t.db, {
    tool: TOOL,
    ...(cohort ? { cohort } : {}),
    maxBound: 1, // no evidence needed: the race is the subject
    reason: 'race',
    operator: 'ops-gus',
    hmacKey: HMAC,
  });

/** Runs `p`, keeping the refusals the design names, rethrowing anything else (a deadlock among them). */
const settle = (p: Promise<unknown>) =>
  p.then(
    () => 'done',
    (err: unknown) => {
      if (err instanceof ReenableRefused || err instanceof StagedReenableOpen) return 'refused';
      throw err;
    },
  );

async function state() {
  const sw = await t.db.selectFrom('tool_switches').select('enabled').where('tool', '=', TOOL).executeTakeFirst();
  const open = await t.db
    .selectFrom('tool_reenable_stages')
    .select('stage')
    .where('tool', '=', TOOL)
    .where('ended_at', 'is', null)
    .execute();
  return { enabled: sw?.enabled ?? true, open: open.map((o) => o.stage) };
}

/** Deadlocks Postgres detected in this test's database (retried by inTransaction, so only counted here). */
async function deadlocks(): Promise<number> {
  // Statistics reach pg_stat_database within about a second of the transaction that detected it.
  await new Promise((r) => setTimeout(r, 1500));
  await sql`select pg_stat_clear_snapshot()`.execute(t.db);
  const { rows } = await sql<{ n: string }>`select deadlocks as n from pg_stat_database where datname = current_database()`.execute(t.db);
  return Number(rows[0]?.n ?? 0);
}

async function reset() {
  await t.db.deleteFrom('tool_reenable_stages').execute();
  await setSwitch(t.db, TOOL, false, 'ops-gus', HMAC);
}

describe('staged re-enable: switch and advance at once', () => {
  it('switch on racing the advance that starts read_only (30 rounds): one of them is refused, never on with a stage open', async () => {
    for (let round = 0; round < 30; round++) {
      await reset();
      const outcomes = await Promise.all([settle(setSwitch(t.db, TOOL, true, 'ops-gus', HMAC)), settle(advance())]);
      const s = await state();
      expect(outcomes, `round ${round}: ${JSON.stringify(s)}`).toContain('refused');
      expect(s.enabled && s.open.length > 0, `round ${round}: ${JSON.stringify(s)}`).toBe(false);
    }
  });

  it('switch off racing the advance from cohort to everyone (30 rounds): no deadlock, and the switch ends as the later one left it', async () => {
    const before = await deadlocks();
    for (let round = 0; round < 30; round++) {
      await reset();
      await advance();
      await advance({ tenants: ['quillfeather'], users: [] });
      const outcomes = await Promise.all([settle(setSwitch(t.db, TOOL, false, 'ops-gus', HMAC)), settle(advance())]);
      const s = await state();
      expect(outcomes.length).toBe(2);
      // Either the advance went first (everyone, then off: contained, no stage) or the switch-off
      // did (the advance then starts read_only over, or is refused).
      expect(s.enabled, `round ${round}: ${JSON.stringify(s)}`).toBe(false);
      expect(
        s.open.filter((x) => x !== 'read_only'),
        `round ${round}`,
      ).toEqual([]);
    }
    expect(await deadlocks()).toBe(before);
  });
});
