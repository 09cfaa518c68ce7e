import { createTestDatabase, dropQueuePrefix, TEST_REDIS_URL, testQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';
import { createServiceContext, type ServiceContext } from '../../src/service-context.ts';

/** A service's shared context (pool, Redis, logger, ready checks) over a test database of its own. */
export interface ProbeContext {
  /** The test database the context's pool connects to (its own pool: `t.db`, the "other replica"). */
  readonly t: TestDatabase;
  readonly ctx: ServiceContext<unknown>;
  /**
   * Closes the context, then drops its queue prefix and database. `boundMs` bounds the wait for
   * the context's close (a test that leaves transactions hung on purpose); unbounded by default.
   */
  close(boundMs?: number): Promise<void>;
}

/**
 * Starts `createServiceContext(name, …)` in test mode over a new test database (`migrate`: with
 * the ledger's schema, default false) and a fresh queue prefix on the test Redis; `env` adds to
 * or overrides its environment (a pool bound, say).
 */
export async function probeContext(name: string, opts: { migrate?: boolean; env?: Record<string, string> } = {}): Promise<ProbeContext> {
  const t = await createTestDatabase({ migrate: opts.migrate ?? false });
  const prefix = testQueuePrefix();
  const ctx = createServiceContext(
    name,
    {},
    { GATEHOUSE_ENV: 'test', DATABASE_URL: t.url, REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix, ...opts.env },
  );
  return {
    t,
    ctx,
    async close(boundMs) {
      const closed = ctx.close();
      await (boundMs === undefined ? closed : Promise.race([closed, new Promise((done) => setTimeout(done, boundMs).unref())]));
      await dropQueuePrefix(TEST_REDIS_URL, prefix);
      await t.drop();
    },
  };
}
