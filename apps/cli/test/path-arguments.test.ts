import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// A path argument of the wrong kind was answered with the raw error of the first file call:
// `audit verify --witness <a directory>` printed "EISDIR: illegal operation on a directory, read"
// and exited 1 (as if the chain were broken); `delegation keys <a file>` printed "EEXIST: file
// already exists, mkdir". Both are now usage errors (exit 2) naming the path and what was
// expected, before anything is read or written.

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(resolve(tmpdir(), 'gh-cli-paths-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// No database answers here: a check that ran after the connection would exit 4, not 2.
const env = { DATABASE_URL: 'postgres://127.0.0.1:9/none', GATEHOUSE_STATE_DIR: resolve(tmpdir(), 'gh-cli-paths-state') };

describe('a path argument of the wrong kind', () => {
  it('audit verify --witness <a directory>: exit 2 naming the path, before the database', { timeout: 60_000 }, async () => {
    const witnessDir = resolve(dir, 'witness-dir');
    mkdirSync(witnessDir);
    const r = await runGatehouse(['audit', 'verify', '--witness', witnessDir], env, 30_000);
    expect(r.code).toBe(EXIT.usage);
    expect(r.stderr).toContain(`--witness ${witnessDir} is a directory`);
    expect(r.stderr).not.toMatch(/EISDIR/);
    const viaEnv = await runGatehouse(['audit', 'verify'], { ...env, AUDIT_ANCHOR_WITNESS_PATH: witnessDir }, 30_000);
    expect(viaEnv.code).toBe(EXIT.usage);
    expect(viaEnv.stderr).toContain(`AUDIT_ANCHOR_WITNESS_PATH ${witnessDir} is a directory`);
  });

  it('delegation keys <a file>, or a path under a file: exit 2 naming the path, nothing written', { timeout: 60_000 }, async () => {
    const file = resolve(dir, 'not-a-dir');
    writeFileSync(file, 'x');
    const r = await runGatehouse(['delegation', 'keys', file], env, 30_000);
    expect(r.code).toBe(EXIT.usage);
    expect(r.stderr).toContain(`${file} is a file`);
    expect(r.stderr).not.toMatch(/EEXIST/);
    const under = await runGatehouse(['delegation', 'keys', resolve(file, 'keys')], env, 30_000);
    expect(under.code).toBe(EXIT.usage);
    expect(under.stderr).toContain(`is under ${file}, a file`);
    expect(under.stderr).not.toMatch(/ENOTDIR/);
    expect(readdirSync(dir).sort()).toEqual(['not-a-dir', 'witness-dir']);
    // A directory (or a new one) still gets the key pair.
    const ok = await runGatehouse(['delegation', 'keys', resolve(dir, 'keys')], env, 30_000);
    expect(ok.code).toBe(EXIT.ok);
    expect(readdirSync(resolve(dir, 'keys')).sort()).toEqual(['delegation-ed25519.pem', 'delegation-jwks.json']);
  });
});
