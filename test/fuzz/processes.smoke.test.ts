import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type RunningStack } from '@gatehouse/cli';
import { createTestDatabase, dropQueuePrefix, freePort, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import type { Surface } from './support/apps.ts';
import { send } from './support/client.ts';
import { sendChecked } from './support/fuzz.ts';
import { requestArb } from './support/requests.ts';
import { ROUTES } from './support/routes.ts';

// The same fuzzed requests against the real processes (their main.ts, telemetry preload and
// process-level handlers): a few hundred per surface (FUZZ_PROCESS_RUNS), then each process is
// still running, answers /healthz, and its log has no unhandled error.

const SURFACES: Surface[] = ['agent-loop', 'approval', 'ops'];
const PORT_VARS: Record<Surface, string> = { 'agent-loop': 'AGENT_LOOP_PORT', approval: 'APPROVAL_PORT', ops: 'OPS_PORT' };
const RUNS = Number(process.env.FUZZ_PROCESS_RUNS ?? 200);

let t: TestDatabase;
let prefix: string;
let stack: RunningStack;
let dir: string;
beforeAll(async () => {
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  dir = mkdtempSync(resolve(tmpdir(), 'gh-fuzz-'));
  const env: Record<string, string> = {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: prefix,
    GATEHOUSE_ENV: 'test',
    LOG_LEVEL: 'warn',
  };
  for (const s of SURFACES) env[PORT_VARS[s]] = String(await freePort());
  stack = await startStack({ env, dir, only: SURFACES, readyTimeoutMs: 150_000 });
});
afterAll(async () => {
  await stack?.stop();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

describe.each(SURFACES)('%s as a process', (surface) => {
  const url = () => `http://127.0.0.1:${stack.ports[surface]}`;

  it(`answers ${RUNS} fuzzed requests below 500`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(...ROUTES[surface].map(requestArb)), async (req) => {
        await sendChecked(url(), req);
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
  });

  it('is still running, answers /healthz and logged no unhandled error', async () => {
    expect(stack.processes.get(surface)?.exitCode).toBeNull();
    expect((await send(url(), { method: 'GET', path: '/healthz' })).status).toBe(200);
    const log = readFileSync(resolve(dir, `${surface}.log`), 'utf8');
    expect(log).not.toMatch(/unhandled/i);
    expect(log.split('\n').filter((l) => /"level":(50|60)/.test(l))).toEqual([]);
  });
});
