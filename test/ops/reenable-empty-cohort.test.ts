import { describe, expect, it } from 'vitest';
import { ReenableRefused, setSwitch } from '@gatehouse/operations';
import { HMAC, reenableFixture, TOOL } from './reenable-support.ts';

// docs/decisions/0310-staged-reenable.md: the cohort stage admits the cohort named. The CLI refuses
// `--cohort` naming no one (test/ops/containment-cli-args.test.ts); the advance itself refuses it
// too, for any caller, with its reason — before, it reached the stage row's CHECK constraint
// (migration 20261201000500) and failed with a raw constraint violation (an `internal` answer).

const { db, advance } = reenableFixture('test');

const openStages = async () =>
  (await db().selectFrom('tool_reenable_stages').select('stage').where('tool', '=', TOOL).where('ended_at', 'is', null).execute()).map(
    (r) => r.stage,
  );

describe('reenable advance with an empty cohort', () => {
  it('is refused (cohort_needed) and the stage stays read_only; a cohort naming someone advances', async () => {
    await setSwitch(db(), TOOL, false, 'ops-gus', HMAC);
    await advance(); // read_only
    const refused = await advance({ tenants: [], users: [] }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ReenableRefused);
    expect((refused as ReenableRefused).reason).toBe('cohort_needed');
    expect((refused as Error).message).toMatch(/names no tenant or user/);
    expect(await openStages()).toEqual(['read_only']);
    expect((await advance({ tenants: ['northwind'], users: [] })).stage).toBe('cohort');
  });
});
