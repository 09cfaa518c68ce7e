import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { SERVICES } from '@gatehouse/cli';

// Each service entry, started as a process in production with a bad configuration, must refuse
// to boot: exit non-zero and name every problem (docs/decisions/0180-strict-production-mode.md).
// The complete configuration below is accepted by parseEnv (packages/platform/test/production-env.unit.test.ts).
const GOOD: Record<string, string> = {
  GATEHOUSE_AUDIT_HMAC_KEY: 'h'.repeat(32),
  GATEHOUSE_AUTH_JWKS_URL: 'https://idp.example.com/jwks.json',
  GATEHOUSE_AUTH_ISSUER: 'https://idp.example.com/',
  GATEHOUSE_AUTH_AUDIENCE: 'gatehouse',
  GATEHOUSE_AUTH_ALGORITHMS: 'RS256,ES256',
  // Never reached: the refusal comes before any connection.
  DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
  REDIS_URL: 'redis://127.0.0.1:1',
};

/** Runs a service entry with exactly `env` (GATEHOUSE_ENV unset unless given: the default is production). */
function boot(service: string, env: Record<string, string | undefined>): Promise<{ code: number | null; output: string }> {
  return new Promise((done, fail) => {
    const entry = SERVICES.find((x) => x.name === service)?.entry;
    if (!entry) throw new Error(`no service ${service}`);
    const child = spawn(process.execPath, [resolve(repoRoot, entry)], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH, LOG_LEVEL: 'warn', OTEL_SDK_DISABLED: 'true', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`${service} did not exit within 90 s:\n${output}`));
    }, 90_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      done({ code, output });
    });
  });
}

describe('production refuses to boot a bad configuration (each service entry as a process)', () => {
  it.each(['agent-loop', 'approval', 'ops', 'policy-gateway', 'executor'])(
    '%s with no configuration at all: exit non-zero, every problem listed',
    async (service) => {
      const { code, output } = await boot(service, {});
      expect(code, output).not.toBe(0);
      for (const line of [
        /refusing to start in production/,
        /GATEHOUSE_AUDIT_HMAC_KEY: must be set/,
        /GATEHOUSE_AUTH_JWKS_URL: must be set/,
        /GATEHOUSE_AUTH_ISSUER: must be set/,
        /GATEHOUSE_AUTH_AUDIENCE: must be set/,
        /GATEHOUSE_AUTH_ALGORITHMS: must be set/,
      ])
        expect(output).toMatch(line);
    },
  );

  it.each([
    ['a weak secret', { GATEHOUSE_AUDIT_HMAC_KEY: 'h'.repeat(20) }, /GATEHOUSE_AUDIT_HMAC_KEY: too weak/],
    ['a shared secret', { GATEHOUSE_AUTH_SECRET: 'h'.repeat(32) }, /GATEHOUSE_AUDIT_HMAC_KEY: the same value as GATEHOUSE_AUTH_SECRET/],
    [
      'HS256 user tokens',
      { GATEHOUSE_AUTH_JWKS_URL: undefined, GATEHOUSE_AUTH_SECRET: 's'.repeat(32) },
      /GATEHOUSE_AUTH_JWKS_URL: must be set/,
    ],
    ['an HS algorithm', { GATEHOUSE_AUTH_ALGORITHMS: 'HS256' }, /HS256 not allowed/],
    ['no audience', { GATEHOUSE_AUTH_AUDIENCE: undefined }, /GATEHOUSE_AUTH_AUDIENCE: must be set/],
    ['no webhook sealing key', {}, /GATEHOUSE_WEBHOOK_SECRET_KEY: must be set/],
    [
      'a webhook sealing key shared with the audit HMAC',
      { GATEHOUSE_WEBHOOK_SECRET_KEY: 'h'.repeat(32) },
      /GATEHOUSE_WEBHOOK_SECRET_KEY: the same value/,
    ],
  ])('agent-loop with %s', async (_name, change, expected) => {
    const { code, output } = await boot('agent-loop', { ...GOOD, ...change });
    expect(code, output).not.toBe(0);
    expect(output).toMatch(expected);
  });

  it('ops without its webhook sealing key: refused', async () => {
    const { code, output } = await boot('ops', GOOD);
    expect(code, output).not.toBe(0);
    expect(output).toMatch(/GATEHOUSE_WEBHOOK_SECRET_KEY: must be set/);
  });

  it('audit without a signing key: refused, and no key is generated', async () => {
    const dir = mkdtempSync(resolve(tmpdir(), 'gh-prod-key-'));
    const missing = resolve(dir, 'audit.pem');
    const unset = await boot('audit', GOOD);
    expect(unset.code, unset.output).not.toBe(0);
    expect(unset.output).toMatch(/AUDIT_SIGNING_KEY_PATH: must be set/);
    const absent = await boot('audit', { ...GOOD, AUDIT_SIGNING_KEY_PATH: missing });
    expect(absent.code, absent.output).not.toBe(0);
    expect(absent.output).toMatch(/AUDIT_SIGNING_KEY_PATH: .*does not exist/);
    expect(existsSync(missing)).toBe(false);
    // An RSA key is not the Ed25519 key anchors are signed with.
    const rsa = resolve(dir, 'rsa.pem');
    writeFileSync(rsa, generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const wrong = await boot('audit', { ...GOOD, AUDIT_SIGNING_KEY_PATH: rsa });
    expect(wrong.code, wrong.output).not.toBe(0);
    expect(wrong.output).toMatch(/is not an Ed25519 key/);
  });

  // ADR 0570: anchors are also witnessed outside Postgres; production names where.
  it('audit with its key but without an anchor witness: refused', async () => {
    const key = resolve(mkdtempSync(resolve(tmpdir(), 'gh-prod-witness-')), 'audit.pem');
    writeFileSync(key, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const unset = await boot('audit', { ...GOOD, AUDIT_SIGNING_KEY_PATH: key });
    expect(unset.code, unset.output).not.toBe(0);
    expect(unset.output).toMatch(/AUDIT_ANCHOR_WITNESS_PATH: must be set/);
    expect(unset.output).not.toMatch(/AUDIT_SIGNING_KEY_PATH/);
  });

  it('executor without its delegation signing key: refused, and no key is generated', async () => {
    const dir = mkdtempSync(resolve(tmpdir(), 'gh-prod-delegation-'));
    const unset = await boot('executor', GOOD);
    expect(unset.code, unset.output).not.toBe(0);
    expect(unset.output).toMatch(/GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: must be set/);
    const missing = resolve(dir, 'delegation.pem');
    const absent = await boot('executor', { ...GOOD, GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: missing });
    expect(absent.code, absent.output).not.toBe(0);
    expect(absent.output).toMatch(/GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: .*does not exist/);
    expect(existsSync(missing)).toBe(false);
  });

  it('executor whose lease does not outlive its adapter deadline: refused, the two settings named', async () => {
    const { code, output } = await boot('executor', { ...GOOD, LEASE_MS: '19000', EXECUTION_DEADLINE_MS: '15000' });
    expect(code, output).not.toBe(0);
    expect(output).toMatch(/LEASE_MS: 19000 ms must be at least EXECUTION_DEADLINE_MS \(15000 ms\) \+ 5000 ms/);
    expect((await boot('executor', GOOD)).output).not.toMatch(/LEASE_MS/); // the defaults (30 s, 15 s) pass
  });

  it.each([
    ['model-stub', /model-stub .* never runs in production/],
    ['staging', /staging systems .* never runs in production/],
  ])('%s (a test double with test endpoints) refuses production even when configured', async (service, expected) => {
    const { code, output } = await boot(service, GOOD);
    expect(code, output).not.toBe(0);
    expect(output).toMatch(expected);
  });
});
