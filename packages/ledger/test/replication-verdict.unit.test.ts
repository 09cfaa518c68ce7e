import { describe, expect, it } from 'vitest';
import { judgeReplication, type LedgerReplication, type StandbyState } from '../src/replication.ts';

// docs/decisions/0775: a promote must lose nothing the services acknowledged. Each setting that
// breaks that is named, with what to change; a single node without a standby passes.

const standby = (over: Partial<StandbyState> = {}): StandbyState => ({
  name: 's1',
  state: 'streaming',
  syncState: 'sync',
  replayLagMs: 1,
  ...over,
});
const primary = (over: Partial<LedgerReplication> = {}): LedgerReplication => ({
  inRecovery: false,
  synchronousCommit: 'on',
  synchronousStandbyNames: 's1',
  standbys: [standby()],
  ...over,
});

describe('judgeReplication', () => {
  it.each([
    ['a synchronous standby streaming, commit on', primary(), 'synchronous'],
    ['remote_apply', primary({ synchronousCommit: 'remote_apply' }), 'synchronous'],
    [
      'a quorum standby',
      primary({ synchronousStandbyNames: 'ANY 1 (s1, s2)', standbys: [standby({ syncState: 'quorum' })] }),
      'synchronous',
    ],
    ['no standby, none required', primary({ synchronousStandbyNames: '', standbys: [] }), 'no_standby'],
    ['no standby, commit local', primary({ synchronousStandbyNames: '', standbys: [], synchronousCommit: 'local' }), 'no_standby'],
    [
      'a standby streaming, none required',
      primary({ synchronousStandbyNames: '', standbys: [standby({ syncState: 'async' })] }),
      'asynchronous',
    ],
    ['commit local with a synchronous standby', primary({ synchronousCommit: 'local' }), 'asynchronous'],
    ['commit remote_write', primary({ synchronousCommit: 'remote_write' }), 'asynchronous'],
    ['commit off, even alone', primary({ synchronousCommit: 'off', synchronousStandbyNames: '', standbys: [] }), 'asynchronous'],
    ['required, none connected', primary({ standbys: [] }), 'waiting'],
    [
      'required, the one connected still catching up',
      primary({ standbys: [standby({ state: 'catchup', syncState: 'potential' })] }),
      'waiting',
    ],
    ['the URL reaches a standby', primary({ inRecovery: true, standbys: [] }), 'standby'],
    ['sync state not visible to the role', primary({ standbys: [standby({ state: null, syncState: null })] }), 'unknown'],
  ])('%s: %s', (_name, r, kind) => {
    expect(judgeReplication(r).kind).toBe(kind);
  });

  it('names what to change, and which standby not to promote beside a synchronous one', () => {
    expect(judgeReplication(primary({ synchronousStandbyNames: '', standbys: [standby({ syncState: 'async' })] })).why).toMatch(
      /s1 streams asynchronously: synchronous_standby_names is empty/,
    );
    expect(judgeReplication(primary({ synchronousCommit: 'local' })).why).toMatch(/set it to on or remote_apply/);
    const mixed = judgeReplication(primary({ standbys: [standby(), standby({ name: 's2', syncState: 'async' })] }));
    expect(mixed).toEqual({ kind: 'synchronous', why: 's1 confirms every commit; promote only it, not s2 (not synchronous)' });
  });
});
