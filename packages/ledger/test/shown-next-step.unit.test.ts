import { describe, expect, it } from 'vitest';
import { releaseHoldOf, shownNextStep } from '../src/releases.ts';

// A live run of a drained release is shown held, with what lets it go on (ADR 0480). A release
// retired by `release retire` or a rollback (ADR 0728) is drained too, but resuming it lets
// nothing go on — no service of it runs any more — so its runs name requeue and quarantine only,
// as `release retire` itself prints (found by h120's on-call pass: a retired canary's run said
// "goes on when they resume it (gatehouse queues resume --release rel-2)").

const run = (next_step: string | null = null) => ({ state: 'received' as const, next_step, release_id: 'rel-2' });

describe('releaseHoldOf', () => {
  it('reads the release row: not draining → no hold; draining → draining; draining and retired → retired', () => {
    expect(releaseHoldOf({ draining: false, status: 'active' })).toBeNull();
    expect(releaseHoldOf({ draining: false, status: 'retired' })).toBeNull();
    expect(releaseHoldOf({ draining: true, status: 'candidate' })).toBe('draining');
    expect(releaseHoldOf({ draining: true, status: 'retired' })).toBe('retired');
    expect(releaseHoldOf(undefined)).toBeNull();
  });
});

describe('shownNextStep', () => {
  it('a drained release: held until on-call resumes it or moves its work', () => {
    expect(shownNextStep(run(), 'draining')).toMatch(/^Held: on-call is draining release rel-2; .*queues resume --release rel-2/);
  });

  it('a retired release: held until on-call moves its work, never "resume it"', () => {
    const shown = shownNextStep(run('Waiting for a lead.'), 'retired')!;
    expect(shown).toMatch(/^Held: release rel-2 was retired/);
    expect(shown).toContain('gatehouse queues requeue --from rel-2 --to');
    expect(shown).toContain('gatehouse queues quarantine --release rel-2');
    expect(shown).not.toContain('queues resume');
    expect(shown).toMatch(/Then: Waiting for a lead\.$/);
  });

  it('no hold, or a run that ended: its own next step', () => {
    expect(shownNextStep(run('x'), null)).toBe('x');
    expect(shownNextStep({ ...run('done'), state: 'completed' }, 'retired')).toBe('done');
  });

  it('a received run without a next step of its own says what it waits for (ADR 0768); any other state shows null', () => {
    const shown = shownNextStep(run(), null)!;
    expect(shown).toMatch(/^Received: the agent loop of release rel-2 starts on it/);
    expect(shown).toContain('gatehouse stack status');
    expect(shownNextStep({ ...run(), state: 'investigating' }, null)).toBeNull();
  });
});
