import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// A path argument of the wrong kind was answered with the raw error of the first file call:
// `audit verify --witness <a directory>` printed "EISDIR: illegal operation on a directory, read"
// and exited 1 (as if the chain were broken); `delegation keys <a file>` printed "EEXIST: file
// already exists, mkdir". Both are now usage errors (exit 2) naming the path and what was
// expected, before anything is read or written. A key file inside <dir> that is a directory, or
// cannot be read, printed the raw error too ("EISDIR: illegal operation on a directory, read",
// exit 1) — after the signing key had been written when only the JWKS was the directory.

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

  it(
    'delegation keys <dir> whose key file is a directory or cannot be read: exit 2 naming it, nothing written',
    { timeout: 60_000 },
    async () => {
      const signingDir = resolve(dir, 'signing-is-dir');
      mkdirSync(resolve(signingDir, 'delegation-ed25519.pem'), { recursive: true });
      const r = await runGatehouse(['delegation', 'keys', signingDir], env, 30_000);
      expect(r.code).toBe(EXIT.usage);
      expect(r.stderr).toContain(`${resolve(signingDir, 'delegation-ed25519.pem')} is a directory`);
      expect(r.stderr).not.toMatch(/EISDIR/);
      expect(readdirSync(signingDir)).toEqual(['delegation-ed25519.pem']);

      const jwksDir = resolve(dir, 'jwks-is-dir');
      mkdirSync(resolve(jwksDir, 'delegation-jwks.json'), { recursive: true });
      const j = await runGatehouse(['delegation', 'keys', jwksDir], env, 30_000);
      expect(j.code).toBe(EXIT.usage);
      expect(j.stderr).toContain(`${resolve(jwksDir, 'delegation-jwks.json')} is a directory`);
      expect(readdirSync(jwksDir)).toEqual(['delegation-jwks.json']); // the signing key was not written first

      // Unreadable even as root: a socket where the signing key should be (ENXIO on open).
      const socketDir = resolve(dir, 'signing-is-socket');
      mkdirSync(socketDir);
      const server = createServer();
      await new Promise<void>((ok) => server.listen(resolve(socketDir, 'delegation-ed25519.pem'), ok));
      try {
        const s = await runGatehouse(['delegation', 'keys', socketDir], env, 30_000);
        expect(s.code).toBe(EXIT.usage);
        expect(s.stderr).toContain(`${resolve(socketDir, 'delegation-ed25519.pem')} is not a regular file`);
        expect(s.stderr).not.toMatch(/ENXIO/);
        expect(readdirSync(socketDir)).toEqual(['delegation-ed25519.pem']);
      } finally {
        await new Promise((ok) => server.close(ok));
      }
    },
  );
});
