import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  bindingDigest,
  DelegationRejected,
  ensureDelegationKeyPair,
  loadDelegationJwks,
  loadDelegationSigningKey,
  mintDelegatedToken,
  verifyDelegatedToken,
  type DelegationSigningKey,
} from '../src/index.ts';

const grant = {
  sub: 'rep-ana',
  act: { sub: 'support-agent' },
  aud: 'payments',
  scope: 'refund:create',
  tenant: 'quillfeather',
  ceiling: 50_000,
  epoch: 1,
  op: 'wf-1:action:1',
  fence: 1,
  target: { orderId: 'O-1001', amountCents: 1200 },
};

const verify = (token: string, jwksPath: string) =>
  verifyDelegatedToken(token, { keys: loadDelegationJwks(jwksPath), audience: 'payments', scope: 'refund:create', minEpoch: 1 });

describe('delegation keys (docs/decisions/0170-delegated-credentials-bind-the-operation.md)', () => {
  it('rotation: the new key is added to the JWKS, tokens of the old and the new key verify, and once the old key is gone its tokens are refused', async () => {
    const dir = mkdtempSync(resolve(tmpdir(), 'gh-keys-'));
    try {
      const jwks = resolve(dir, 'jwks.json');
      const oldKid = await ensureDelegationKeyPair(resolve(dir, 'old.pem'), jwks);
      const newKid = await ensureDelegationKeyPair(resolve(dir, 'new.pem'), jwks);
      expect(newKid).not.toBe(oldKid);
      const oldKey: DelegationSigningKey = await loadDelegationSigningKey(resolve(dir, 'old.pem'));
      const newKey: DelegationSigningKey = await loadDelegationSigningKey(resolve(dir, 'new.pem'));
      expect([oldKey.kid, newKey.kid]).toEqual([oldKid, newKid]);
      const fromOld = await mintDelegatedToken(grant, oldKey);
      expect(await verify(fromOld, jwks)).toMatchObject({ op: grant.op, fence: 1, dig: bindingDigest('refund:create', grant.target) });
      expect((await verify(await mintDelegatedToken(grant, newKey), jwks)).jti).toMatch(/^[0-9a-f-]{36}$/);

      // Step 4: only the new key is listed.
      const doc = JSON.parse(readFileSync(jwks, 'utf8')) as { keys: Array<{ kid: string }> };
      writeFileSync(jwks, JSON.stringify({ keys: doc.keys.filter((k) => k.kid === newKid) }));
      await expect(verify(fromOld, jwks)).rejects.toEqual(new DelegationRejected('invalid_token:ERR_JWKS_NO_MATCHING_KEY'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a key file that cannot be parsed is named in the error, its bytes never repeated, and nothing is written', async () => {
    const dir = mkdtempSync(resolve(tmpdir(), 'gh-keys-'));
    try {
      const pem = resolve(dir, 'bad.pem');
      const jwks = resolve(dir, 'jwks.json');
      writeFileSync(pem, 'garbage-KEY-BYTES');
      await expect(loadDelegationSigningKey(pem)).rejects.toThrow(
        `the delegation signing key at ${pem} cannot be read as a PEM private key`,
      );
      await expect(ensureDelegationKeyPair(pem, jwks)).rejects.toThrow(`at ${pem} cannot be read as a PEM private key`);
      await expect(ensureDelegationKeyPair(pem, jwks)).rejects.not.toThrow('garbage-KEY-BYTES');
      expect(existsSync(jwks)).toBe(false);

      writeFileSync(jwks, '{"keys": [garbage-JWKS');
      expect(() => loadDelegationJwks(jwks)).toThrow(`the delegation JWKS at ${jwks} cannot be read as JSON: not valid JSON`);
      expect(() => loadDelegationJwks(jwks)).not.toThrow('garbage-JWKS');
      await expect(ensureDelegationKeyPair(resolve(dir, 'new.pem'), jwks)).rejects.toThrow(
        `the delegation JWKS at ${jwks} cannot be read as JSON`,
      );
      writeFileSync(jwks, '{}');
      await expect(ensureDelegationKeyPair(resolve(dir, 'new.pem'), jwks)).rejects.toThrow(
        `the delegation JWKS at ${jwks} has no "keys" list`,
      );
      expect(readFileSync(jwks, 'utf8')).toBe('{}');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the binding digest covers the scope and every target field, whatever their order', () => {
    const d = bindingDigest('refund:create', { orderId: 'O-1', amountCents: 100 });
    expect(bindingDigest('refund:create', { amountCents: 100, orderId: 'O-1' })).toBe(d);
    expect(bindingDigest('refund:create', { orderId: 'O-1', amountCents: 101 })).not.toBe(d);
    expect(bindingDigest('refund:create', { orderId: 'O-2', amountCents: 100 })).not.toBe(d);
    expect(bindingDigest('refund:reverse', { orderId: 'O-1', amountCents: 100 })).not.toBe(d);
    expect(bindingDigest('refund:create', { orderId: 'O-1', amountCents: '100' })).not.toBe(d);
  });

  it('a JWKS holding a private or non-Ed25519 key is refused at load', async () => {
    const dir = mkdtempSync(resolve(tmpdir(), 'gh-keys-'));
    try {
      const bad = resolve(dir, 'bad.json');
      writeFileSync(bad, JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0', kid: 'x' }] }));
      expect(() => loadDelegationJwks(bad)).toThrow(/only Ed25519 public keys/);
      writeFileSync(bad, JSON.stringify({ keys: [] }));
      expect(() => loadDelegationJwks(bad)).toThrow(/lists no key/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
