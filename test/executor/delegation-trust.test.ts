import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newDelegationKeyPair } from '@gatehouse/credentials';
import { startHarness, waitFor, type Harness } from './support/harness.ts';
import { executorEnv, startExecutor, type ExecutorProcess } from './support/processes.ts';

// A second executor started with a delegation key of its own (its own state folder) was `ready`
// while staging refused every token it signed with 401 (ADR 0761). Staging now publishes the JWKS
// it verifies with, and the executor's `delegationKey` readiness check compares its key with it:
// not ready, needing an operator, naming both key ids — and ready with the key staging trusts.

let h: Harness;
const running: ExecutorProcess[] = [];
beforeAll(async () => {
  h = await startHarness({ poolSize: 4 });
});
afterAll(async () => {
  for (const ex of running) await ex.stop(2000);
  await h?.close();
});

/** Starts an executor minting with the key at `signingKeyPath`; resolves with its health port once it listens. */
async function executorWith(signingKeyPath: string): Promise<number> {
  const ex = startExecutor(executorEnv({ databaseUrl: h.tdb.url, prefix: h.prefix, stagingUrl: h.stagingUrl, signingKeyPath }));
  running.push(ex);
  await ex.ready;
  const line = ex
    .output()
    .split('\n')
    .find((l) => l.includes('"msg":"executor ready"'))!;
  return (JSON.parse(line) as { port: number }).port;
}

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
      const stranger = await newDelegationKeyPair();
      const path = resolve(mkdtempSync(resolve(tmpdir(), 'gh-stranger-')), 'delegation-ed25519.pem');
      writeFileSync(path, stranger.signing.key.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
      const port = await executorWith(path);
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
      expect(reason).toContain(`its kid ${stranger.signing.kid} is not in the JWKS they publish`);
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
