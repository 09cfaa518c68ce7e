import { describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { ReenableRefused, setSwitch, StagedReenableOpen } from '@gatehouse/operations';
import { HMAC, reenableFixture, TOOL } from './reenable-support.ts';

// docs/decisions/0310-staged-reenable.md: `switch on` is refused while a stage is open, and every
// change of a tool's containment is one transaction. Concurrent `switch on|off` and
// `reenable advance` of one tool must serialize: never a switch on with a stage still open, never
// a deadlock between them (docs/decisions/0683-switch-off-serializes-with-the-claim.md).

const fixture = reenableFixture('race');
const advance = fixture.advance;

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
  const sw = await fixture.db().selectFrom('tool_switches').select('enabled').where('tool', '=', TOOL).executeTakeFirst();
  const open = await fixture
    .db()
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
  await sql`select pg_stat_clear_snapshot()`.execute(fixture.db());
  const { rows } = await sql<{ n: string }>`select deadlocks as n from pg_stat_database where datname = current_database()`.execute(
    fixture.db(),
  );
  return Number(rows[0]?.n ?? 0);
}

async function reset() {
  await fixture.db().deleteFrom('tool_reenable_stages').execute();
  await setSwitch(fixture.db(), TOOL, false, 'ops-gus', HMAC);
}

describe('staged re-enable: switch and advance at once', () => {
  it('switch on racing the advance that starts read_only (30 rounds): one of them is refused, never on with a stage open', async () => {
    for (let round = 0; round < 30; round++) {
      await reset();
      const outcomes = await Promise.all([settle(setSwitch(fixture.db(), TOOL, true, 'ops-gus', HMAC)), settle(advance())]);
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
      const outcomes = await Promise.all([settle(setSwitch(fixture.db(), TOOL, false, 'ops-gus', HMAC)), settle(advance())]);
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
