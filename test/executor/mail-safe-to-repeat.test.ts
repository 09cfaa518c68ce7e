import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { createStagingApp, type StagingDb } from '@gatehouse/staging';
import { closeServer, createLogger, listen } from '../../packages/platform/src/index.ts';
import { startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0698-epoch-unavailable-wrote-nothing.md: a system of record answers
// `503 epoch_unavailable` only when it wrote nothing (it checks the revocation epoch before any
// effect and rolls the effect back when it cannot hold the epoch across its commit). The mail
// service does not deduplicate, so any other 5xx leaves a customer email unknown; this one is
// safe to send again. Seen in the chaos suite's pg_terminate_backend waves, which end the mail
// service's connections to the epoch's database: a mail the service never sent was parked
// failed_unknown for reconciliation.

let h: Harness;
let epochless: TestDatabase;
let server: Server;
let epochlessUrl: string;
beforeAll(async () => {
  h = await startHarness();
  // The same mail service, reading the epoch from a database that holds none: every effect is
  // refused `503 epoch_unavailable` before it is written.
  epochless = await createTestDatabase({ migrate: false });
  const { app } = createStagingApp({
    db: h.staging,
    delegationJwks: h.delegationKeys.jwks,
    epochDb: epochless.db as unknown as StagingDb,
    log: createLogger('staging-epochless'),
  });
  const listening = await listen(app, 0);
  server = listening.server;
  epochlessUrl = `http://127.0.0.1:${listening.port}`;
});
afterAll(async () => {
  if (server) await closeServer(server);
  await epochless?.drop();
  await h?.close();
});

const mails = async (orderId: string) =>
  h.staging.selectFrom('staging.messages').select('message_id').where('order_id', '=', orderId).execute();
const operation = async (key: string) =>
  h.db.selectFrom('operations').select(['status', 'dispatched_at']).where('key', '=', key).executeTakeFirstOrThrow();

describe('executor: a mail refused 503 epoch_unavailable', () => {
  it('is safe to repeat: the operation goes back to pending with nothing sent, and the next delivery sends one mail', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'notify_customer', orderId, decision: 'ALLOW' });
    await expect(processExecution(a.job, h.deps({ stagingUrl: epochlessUrl }))).rejects.toMatchObject({ name: 'SafeToRepeat' });
    expect(await mails(orderId)).toEqual([]);
    expect(await operation(a.operationKey)).toEqual({ status: 'pending', dispatched_at: null });

    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    expect(await mails(orderId)).toHaveLength(1);
  });

  it('any other 5xx still leaves the mail unknown (failed_unknown): the service may have sent it', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'notify_customer', orderId, decision: 'ALLOW' });
    await h.arm({ target: 'mail', mode: 'server_error', status: 503, times: 1 });
    expect(await processExecution(a.job, h.deps())).toBe('failed_unknown');
    expect((await operation(a.operationKey)).status).toBe('failed_unknown');
  });
});

// 408 and 429 say the mail service did not act on the request (`isUnprocessedStatus`): before,
// the mail adapter made them final (`failed`), so a customer notification refused for the rate
// was never sent. Now they are safe to repeat, as a refused connection is (ADR 0732).
describe('executor: a mail answered 408 or 429', () => {
  for (const mode of ['request_timeout', 'rate_limit'] as const)
    it(`${mode}: the operation goes back to pending with nothing sent, and the next delivery sends one mail`, async () => {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { tool: 'notify_customer', orderId, decision: 'ALLOW' });
      await h.arm({ target: 'mail', mode, times: 1, ...(mode === 'rate_limit' ? { retryAfterMs: 1000 } : {}) });
      await expect(processExecution(a.job, h.deps())).rejects.toMatchObject({ name: 'SafeToRepeat' });
      expect(await mails(orderId)).toEqual([]);
      expect(await operation(a.operationKey)).toEqual({ status: 'pending', dispatched_at: null });
      expect(await processExecution(a.job, h.deps())).toBe('succeeded');
      expect(await mails(orderId)).toHaveLength(1);
    });
});
