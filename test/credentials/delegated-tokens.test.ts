import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { SERVICES, serviceSecrets, startStack, type RunningStack } from '@gatehouse/cli';
import { createTestDatabase, freePort, type TestDatabase } from '@gatehouse/test-harness';
// @gatehouse/credentials is not a dependency of the test package; imported by path (the same module).
import {
  DELEGATION_ISSUER,
  loadDelegationSigningKey,
  mintDelegatedToken,
  newDelegationKeyPair,
  type DelegationSigningKey,
} from '../../packages/credentials/src/index.ts';
import { readTokenBindingSwitch } from '@gatehouse/staging';
import { delegationKeyEnv } from '@gatehouse/test-harness';

/**
 * Delegated tokens against the real staging process over HTTP and its real Postgres
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md): a token pays exactly the
 * request it was minted for, once; everything else is refused with a reason and no effect,
 * proven by reading the payments ledger back.
 */
let db: TestDatabase;
let stack: RunningStack;
let base: string;
let signing: DelegationSigningKey;

beforeAll(async () => {
  db = await createTestDatabase(); // the ledger's tables: credential_epochs holds epoch 1
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-tokens-'));
  const env: Record<string, string> = {
    DATABASE_URL: db.url,
    GATEHOUSE_ENV: 'test',
    LOG_LEVEL: 'warn',
    STAGING_PORT: String(await freePort()),
    ...delegationKeyEnv(dir),
  };
  stack = await startStack({ env, dir, only: ['staging'], readyTimeoutMs: 150_000 });
  base = `http://127.0.0.1:${stack.ports.staging}`;
  signing = await loadDelegationSigningKey(env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH!);
}, 200_000);

afterAll(async () => {
  await stack?.stop();
  await db?.drop();
});

/** A refund request as the executor sends it: what the token was minted for, unless `send` differs. */
interface Refund {
  orderId: string;
  amountCents: number;
  key: string;
  fence: number;
}

const newKey = (): string => `wf-${randomBytes(6).toString('hex')}:action:1`;

/** Mints the executor's token for `r` (epoch 1), signed by `key` (default: the stack's). */
function mint(r: Refund, key: DelegationSigningKey = signing, nowMs?: number): Promise<string> {
  return mintDelegatedToken(
    {
      sub: 'rep-ana',
      act: { sub: 'support-agent' },
      aud: 'payments',
      scope: 'refund:create',
      tenant: 'quillfeather',
      ceiling: 50_000,
      epoch: 1,
      op: r.key,
      fence: r.fence,
      target: { orderId: r.orderId, amountCents: r.amountCents },
    },
    key,
    nowMs,
  );
}

async function pay(token: string, r: Refund): Promise<{ status: number; reason: string | undefined }> {
  const res = await fetch(`${base}/ledger/refunds`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${token}`,
      'idempotency-key': r.key,
      'x-fencing-token': String(r.fence),
    },
    body: JSON.stringify({ orderId: r.orderId, amountCents: r.amountCents, reason: 'damaged item' }),
  });
  const body = (await res.json()) as { error?: { reason?: string } };
  return { status: res.status, reason: body.error?.reason };
}

/** Refunds the payments ledger holds for an order (read-back). */
async function refundsOf(orderId: string): Promise<Array<{ idempotencyKey: string; amountCents: number }>> {
  const res = await fetch(`${base}/ledger/refunds?orderId=${orderId}`);
  return ((await res.json()) as { refunds: Array<{ idempotencyKey: string; amountCents: number }> }).refunds;
}

/** An HS256 token with the retired shared secret and otherwise perfect claims. */
function hs256(r: Refund): string {
  const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({
    iss: DELEGATION_ISSUER,
    sub: 'rep-ana',
    aud: 'payments',
    act: { sub: 'support-agent' },
    scope: 'refund:create',
    tenant: 'quillfeather',
    ceiling: 50_000,
    epoch: 1,
    op: r.key,
    fence: r.fence,
    jti: randomBytes(8).toString('hex'),
    iat: now,
    exp: now + 60,
  })}`;
  return `${input}.${createHmac('sha256', 'local-delegation-secret-change-me').update(input).digest('base64url')}`;
}

describe('a delegated token binds one request', () => {
  it('pays the request it was minted for once; a fresh token with the same key replays it; the same jti is refused', async () => {
    const r = { orderId: 'O-1001', amountCents: 1200, key: newKey(), fence: 1 };
    const first = await mint(r);
    expect(await pay(first, r)).toEqual({ status: 201, reason: undefined });
    expect((await pay(await mint(r), r)).status).toBe(200); // the retry path: new jti, same op
    expect(await pay(first, r)).toEqual({ status: 403, reason: 'token_replayed' });
    expect((await refundsOf('O-1001')).filter((x) => x.idempotencyKey === r.key)).toHaveLength(1);
  });

  it('refuses a captured token against another order, another amount or another key, with no effect', async () => {
    const r = { orderId: 'O-1002', amountCents: 2500, key: newKey(), fence: 1 };
    const captured = await mint(r);
    const before = { a: (await refundsOf('O-1002')).length, b: (await refundsOf('O-1004')).length };
    expect(await pay(captured, { ...r, orderId: 'O-1004' })).toEqual({ status: 403, reason: 'target_mismatch' });
    expect(await pay(captured, { ...r, amountCents: 49_000 })).toEqual({ status: 403, reason: 'target_mismatch' });
    expect(await pay(captured, { ...r, key: newKey() })).toEqual({ status: 403, reason: 'op_mismatch' });
    expect(await pay(captured, { ...r, fence: 2 })).toEqual({ status: 403, reason: 'fence_mismatch' });
    expect({ a: (await refundsOf('O-1002')).length, b: (await refundsOf('O-1004')).length }).toEqual(before);
  });

  it('refuses a fence below the highest seen for the op (fencing at the system of record)', async () => {
    const r = { orderId: 'O-1003', amountCents: 700, key: newKey(), fence: 5 };
    expect((await pay(await mint(r), r)).status).toBe(201);
    const stale = { ...r, fence: 4 };
    expect(await pay(await mint(stale), stale)).toEqual({ status: 409, reason: 'stale_fencing_token' });
    // A fresh key whose newer holder already called: the older holder's first call is refused too.
    const k = newKey();
    const newer = { orderId: 'O-1003', amountCents: 800, key: k, fence: 3 };
    expect((await pay(await mint(newer), newer)).status).toBe(201);
    const older = { ...newer, fence: 2 };
    expect(await pay(await mint(older), older)).toEqual({ status: 409, reason: 'stale_fencing_token' });
    expect((await refundsOf('O-1003')).filter((x) => x.idempotencyKey === r.key || x.idempotencyKey === k)).toHaveLength(2);
  });

  it('refuses an expired token, an HS256 token with the old shared secret and tokens of a foreign Ed25519 key, with no effect', async () => {
    const r = { orderId: 'O-1006', amountCents: 900, key: newKey(), fence: 1 };
    const expired = await pay(await mint(r, signing, Date.now() - 120_000), r);
    expect(expired).toEqual({ status: 401, reason: 'invalid_token:ERR_JWT_EXPIRED' });
    expect(await pay(hs256(r), r)).toEqual({ status: 401, reason: 'invalid_token:ERR_JOSE_ALG_NOT_ALLOWED' });
    const stranger = (await newDelegationKeyPair()).signing;
    expect(await pay(await mint(r, stranger), r)).toEqual({ status: 401, reason: 'invalid_token:ERR_JWKS_NO_MATCHING_KEY' });
    // Same kid as the real key, another private key: the signature does not verify.
    expect(await pay(await mint(r, { key: stranger.key, kid: signing.kid }), r)).toEqual({
      status: 401,
      reason: 'invalid_token:ERR_JWS_SIGNATURE_VERIFICATION_FAILED',
    });
    expect(await refundsOf('O-1006')).toEqual([]);
  });

  it('fails closed without a revocation epoch (503 epoch_unavailable, no effect), and refuses an epoch below the current one', async () => {
    const r = { orderId: 'O-1005', amountCents: 600, key: newKey(), fence: 1 };
    await sql`delete from credential_epochs where id = 1`.execute(db.db);
    try {
      expect(await pay(await mint(r), r)).toEqual({ status: 503, reason: 'epoch_unavailable' });
    } finally {
      await sql`insert into credential_epochs (id, epoch, changed_by) values (1, 2, 'test')`.execute(db.db);
    }
    expect(await pay(await mint(r), r)).toEqual({ status: 403, reason: 'revoked_epoch' }); // minted with epoch 1
    expect(await refundsOf('O-1005')).toEqual([]);
    await sql`update credential_epochs set epoch = 1 where id = 1`.execute(db.db);
  });

  it('the binding switch is refused outside GATEHOUSE_ENV=test', () => {
    expect(() => readTokenBindingSwitch({ GATEHOUSE_TEST_DISABLE_TOKEN_BINDING: '1', GATEHOUSE_ENV: 'production' })).toThrow(
      /GATEHOUSE_ENV=test/,
    );
    expect(readTokenBindingSwitch({ GATEHOUSE_TEST_DISABLE_TOKEN_BINDING: '1', GATEHOUSE_ENV: 'test' })).toBe(true);
  });

  it('control removed: with the binding switched off, a captured token pays another order, twice', async () => {
    await stack.restart('staging', { GATEHOUSE_TEST_DISABLE_TOKEN_BINDING: '1' });
    try {
      const r = { orderId: 'O-1002', amountCents: 3100, key: newKey(), fence: 1 };
      const captured = await mint(r);
      const stolen = { ...r, orderId: 'O-1004', key: newKey() };
      expect((await pay(captured, stolen)).status).toBe(201);
      expect((await pay(captured, { ...stolen, key: newKey() })).status).toBe(201);
      expect((await refundsOf('O-1004')).filter((x) => x.amountCents === 3100)).toHaveLength(2);
    } finally {
      await stack.restart('staging', { GATEHOUSE_TEST_DISABLE_TOKEN_BINDING: undefined });
    }
  }, 200_000);
});

describe('each service of the local stack gets only the delegation material it uses', () => {
  it('the executor the signing key path, staging the JWKS path, no service the retired shared secret', () => {
    const keys = { signing: '/k/delegation-ed25519.pem', jwks: '/k/delegation-jwks.json' };
    const given = {
      GATEHOUSE_DELEGATION_SECRET: 'local-delegation-secret-change-me',
      GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: '/elsewhere.pem',
      GATEHOUSE_DELEGATION_JWKS_PATH: '/elsewhere.json',
    };
    const seen = Object.fromEntries(
      SERVICES.map((s) => {
        const env = serviceSecrets(s.name, given, keys);
        return [s.name, Object.keys(env).filter((k) => k.startsWith('GATEHOUSE_DELEGATION'))];
      }),
    );
    for (const [name, vars] of Object.entries(seen)) {
      if (name === 'executor') expect(vars).toEqual(['GATEHOUSE_DELEGATION_SIGNING_KEY_PATH']);
      else if (name === 'staging') expect(vars).toEqual(['GATEHOUSE_DELEGATION_JWKS_PATH']);
      else expect(vars, name).toEqual([]);
    }
    expect(serviceSecrets('executor', given, keys).GATEHOUSE_DELEGATION_SIGNING_KEY_PATH).toBe(keys.signing);
  });
});
