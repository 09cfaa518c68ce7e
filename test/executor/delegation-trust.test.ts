import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executionsQueue, jobOptionsFor } from '@gatehouse/contracts';
import { newDelegationKeyPair } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL } from '@gatehouse/test-harness';
import { createRedis, QueueRegistry } from '../../packages/platform/src/index.ts';
import { EXECUTIONS_QUEUE, startHarness, waitFor, type Harness } from './support/harness.ts';
import { executorEnv, startExecutor, type ExecutorProcess } from './support/processes.ts';

// A second executor started with a delegation key of its own (its own state folder) was `ready`
// while staging refused every token it signed with 401 (ADR 0761). Staging now publishes the JWKS
// it verifies with, and the executor's `delegationKey` readiness check compares its key with it:
// not ready, needing an operator, naming both key ids — and ready with the key staging trusts.

let h: Harness;
/** A delegation key of its own, which staging does not list (a second stack's state folder). */
let strangerKeyPath: string;
let strangerKid: string;
const running: ExecutorProcess[] = [];
const redis = createRedis(TEST_REDIS_URL);
const prefixes: string[] = [];
beforeAll(async () => {
  h = await startHarness({ poolSize: 4 });
  const stranger = await newDelegationKeyPair();
  strangerKid = stranger.signing.kid;
  strangerKeyPath = resolve(mkdtempSync(resolve(tmpdir(), 'gh-stranger-')), 'delegation-ed25519.pem');
  writeFileSync(strangerKeyPath, stranger.signing.key.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
});
afterAll(async () => {
  for (const ex of running) await ex.stop(2000);
  redis.disconnect();
  for (const p of prefixes) await dropQueuePrefix(TEST_REDIS_URL, p);
  await h?.close();
});

/**
 * Starts an executor minting with the key at `signingKeyPath` on queue prefix `prefix` (the
 * harness's by default); resolves with the process and its health port once it listens.
 */
async function startWith(
  signingKeyPath: string,
  opts: { prefix?: string; env?: Record<string, string> } = {},
): Promise<{ ex: ExecutorProcess; port: number }> {
  const prefix = opts.prefix ?? h.prefix;
  const ex = startExecutor(executorEnv({ databaseUrl: h.tdb.url, prefix, stagingUrl: h.stagingUrl, signingKeyPath }, opts.env));
  running.push(ex);
  await ex.ready;
  const line = ex
    .output()
    .split('\n')
    .find((l) => l.includes('"msg":"executor ready"'))!;
  return { ex, port: (JSON.parse(line) as { port: number }).port };
}

/** {@link startWith} on the harness's prefix: the health port. */
const executorWith = async (signingKeyPath: string): Promise<number> => (await startWith(signingKeyPath)).port;

interface Readyz {
  ready: boolean;
  failing?: Record<string, string>;
  needsOperator?: string[];
}

const readyz = async (port: number): Promise<{ status: number; body: Readyz }> => {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: (await res.json()) as Readyz };
};

describe('the executor is not ready while the systems of record do not trust its delegation key (ADR 0761)', () => {
  it('staging publishes the public keys it verifies with, and nothing private', async () => {
    const res = await fetch(`${h.stagingUrl}/.well-known/jwks.json`);
    expect(res.status).toBe(200);
    const { keys } = (await res.json()) as { keys: Array<Record<string, unknown>> };
    expect(keys.map((k) => k.kid)).toEqual([h.delegationKeys.signing.kid]);
    expect(keys.every((k) => !('d' in k))).toBe(true);
  });

  it(
    'a key of its own: /readyz 503, delegationKey needs an operator and names both key ids and the way out',
    { timeout: 60_000 },
    async () => {
      const port = await executorWith(strangerKeyPath);
      // Postgres and Redis pass within moments of its start; the key check fails for good.
      const { status, body } = await waitFor(
        'delegationKey alone failing',
        async () => {
          const r = await readyz(port);
          return Object.keys(r.body.failing ?? {}).join() === 'delegationKey' ? r : null;
        },
        20_000,
      );
      expect(status).toBe(503);
      expect(body.needsOperator).toEqual(['delegationKey']);
      const reason = body.failing!.delegationKey!;
      expect(reason).toContain(`its kid ${strangerKid} is not in the JWKS they publish`);
      expect(reason).toContain(h.delegationKeys.signing.kid);
      expect(reason).toContain('refuse every token it signs with 401');
      expect(reason).toContain('GATEHOUSE_DELEGATION_SIGNING_KEY_PATH');
    },
  );

  it('the key staging trusts: ready', { timeout: 60_000 }, async () => {
    const port = await executorWith(h.delegationKeyPath);
    const { body } = await waitFor('ready', async () => ((await readyz(port)).status === 200 ? readyz(port) : null), 20_000);
    expect(body).toMatchObject({ ready: true });
    expect(body.failing).toBeUndefined();
  });
});

/** Waits until `/readyz` of `port` fails on `delegationKey` alone: the executor has read the published JWKS. */
async function untrustedSeen(port: number): Promise<void> {
  await waitFor(
    'delegationKey alone failing',
    async () => Object.keys((await readyz(port)).body.failing ?? {}).join() === 'delegationKey',
    20_000,
  );
}

/** A refund on a new order, its execution job on a queue prefix of its own (`prefix`). */
async function refundQueued(): Promise<{ prefix: string; orderId: string; a: Awaited<ReturnType<typeof createAction>> }> {
  const prefix = testQueuePrefix();
  prefixes.push(prefix);
  const orderId = await h.newOrder();
  const a = await createAction(h.db, { tool: 'issue_refund', orderId, amountCents: 3000 });
  await new QueueRegistry(redis, prefix)
    .get(EXECUTIONS_QUEUE)
    .add(executionsQueue.jobName, a.job, { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId });
  return { prefix, orderId, a };
}

const operation = (key: string) => h.db.selectFrom('operations').select(['status', 'error']).where('key', '=', key).executeTakeFirst();
const actionStatus = async (id: string) =>
  (await h.db.selectFrom('actions').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;

describe('an executor whose delegation key is untrusted holds its execution jobs (ADR 0767)', () => {
  it(
    'the job goes back unattempted, nothing is sent, and an executor with the trusted key carries it out once',
    { timeout: 90_000 },
    async () => {
      const { prefix, orderId, a } = await refundQueued();
      const stranger = await startWith(strangerKeyPath, { prefix });
      await untrustedSeen(stranger.port);
      await waitFor(
        'the stranger held the job',
        async () => stranger.ex.output().includes('job held: the systems of record do not trust'),
        30_000,
      );
      // Held, not failed: no operation claimed, no token sent, the action still approved.
      expect(await operation(a.operationKey)).toBeUndefined();
      expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toEqual([]);
      expect(await actionStatus(a.actionId)).toBe('approved');
      await startWith(h.delegationKeyPath, { prefix });
      await waitFor('refund carried out', async () => (await operation(a.operationKey))?.status === 'succeeded', 45_000, 200);
      expect(await actionStatus(a.actionId)).toBe('succeeded');
      expect(await h.refunds(orderId)).toHaveLength(1);
      expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toHaveLength(1);
    },
  );

  it(
    'control removed (GATEHOUSE_TEST_DISABLE_DELEGATION_TRUST_HOLD): it takes the job, the system of record refuses its token with 401, and the refund is not carried out',
    { timeout: 90_000 },
    async () => {
      const { prefix, orderId, a } = await refundQueued();
      const stranger = await startWith(strangerKeyPath, { prefix, env: { GATEHOUSE_TEST_DISABLE_DELEGATION_TRUST_HOLD: '1' } });
      await untrustedSeen(stranger.port);
      const op = await waitFor(
        'the operation ended',
        async () => {
          const o = await operation(a.operationKey);
          return o && o.status !== 'running' && o.status !== 'pending' ? o : null;
        },
        45_000,
        200,
      );
      expect(op).toMatchObject({ status: 'failed' });
      expect(op.error).toMatch(/^401:invalid_token/);
      expect(await actionStatus(a.actionId)).toBe('failed');
      expect(await h.refunds(orderId)).toEqual([]);
    },
  );
});
