import { spawn } from 'node:child_process';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// Audit replicas started together over one fresh key path (docs/decisions/0195-services-as-replicas.md)
// must end up signing with one key, the one on disk that `audit verify` pins: otherwise the
// anchors of all but one replica fail verification.

const ANCHOR = resolve(import.meta.dirname, '../src/domain/anchor.ts');
const PROCESSES = 6;
const ROUNDS = 4;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A process that waits for the common start (a barrier on the wall clock), loads the key and prints its public key. */
const CHILD = `
const { loadSigningKey } = await import(process.env.ANCHOR);
const { createPublicKey } = await import('node:crypto');
const start = Number(process.env.START_AT);
while (Date.now() < start) {}
const key = loadSigningKey(process.env.KEY_PATH);
process.stdout.write(JSON.stringify(createPublicKey(key).export({ type: 'spki', format: 'pem' })));
`;

function loadInChild(path: string, startAt: number, extra: Record<string, string>): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD], {
      env: { ...process.env, ANCHOR, KEY_PATH: path, START_AT: String(startAt), GATEHOUSE_ENV: 'test', ...extra },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    child.on('exit', (code) => (code === 0 ? done(JSON.parse(out) as string) : fail(new Error(`child exited ${code}: ${err}`))));
  });
}

/** Rounds of {@link PROCESSES} processes creating one fresh key path at once; per round, the distinct public keys they sign with and the file's. */
async function race(
  extra: Record<string, string> = {},
  opts: { rounds?: number; until?: (round: { keys: Set<string> }) => boolean } = {},
): Promise<Array<{ keys: Set<string>; onDisk: string }>> {
  const rounds: Array<{ keys: Set<string>; onDisk: string }> = [];
  for (let r = 0; r < (opts.rounds ?? ROUNDS); r++) {
    const dir = mkdtempSync(join(tmpdir(), 'gh-key-race-'));
    dirs.push(dir);
    const path = join(dir, 'keys', 'anchor.pem');
    // Long enough for every process to boot and reach the barrier on a loaded machine (anchor.ts
    // loads the ledger package since it writes the anchor witness, ADR 0570: a slower import).
    const startAt = Date.now() + 8000;
    // With the control removed a process may also read a key another is still writing (a torn
    // file it cannot decode): that is the race too, counted as a key of its own.
    const load = () => loadInChild(path, startAt, extra);
    const keys = await Promise.all(
      Array.from({ length: PROCESSES }, () =>
        Object.keys(extra).length ? load().catch((e: Error) => `unreadable: ${e.message.slice(0, 80)}`) : load(),
      ),
    );
    const onDisk = createPublicKey(createPrivateKey(readFileSync(path)))
      .export({ type: 'spki', format: 'pem' })
      .toString();
    expect(readdirSync(join(dir, 'keys'))).toEqual(['anchor.pem']); // no temporary file left behind
    rounds.push({ keys: new Set(keys), onDisk });
    if (opts.until?.(rounds.at(-1)!)) break;
  }
  return rounds;
}

describe('audit signing key created by replicas starting together', () => {
  it('every process signs with the one key on disk (create-if-absent by hard link)', async () => {
    for (const round of await race()) expect([...round.keys]).toEqual([round.onDisk]);
  }, 120_000);

  it('control removed (check, then write in place): processes sign with keys of their own', async () => {
    // The window is narrow (exists → generate → write), so on a loaded machine a round may miss
    // it: repeat until one round shows two keys, up to 20 rounds.
    const rounds = await race({ GATEHOUSE_TEST_KEY_CHECK_THEN_WRITE: '1' }, { rounds: 20, until: (r) => r.keys.size > 1 });
    expect(rounds.some((r) => r.keys.size > 1)).toBe(true);
  }, 300_000);
});
