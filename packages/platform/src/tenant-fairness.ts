import type { Queue, QueueBase, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { testFaults } from '@gatehouse/contracts';
import type { Logger } from './logger.ts';

/** BullMQ's highest priority number (its lowest priority): `2^21 - 1`. */
export const PRIORITY_LIMIT = 2 ** 21 - 1;

/** How long a queue's per-tenant tags live after their last job, s: a tenant quiet this long starts afresh. */
export const FAIR_TAGS_TTL_S = 3600;

/**
 * Start-time fair queuing over BullMQ priorities (docs/decisions/0500-tenant-fair-queues.md).
 * The queue's virtual time V is the highest tag of a job a worker has started (kept by
 * {@link attachFairClock}); a tenant's job gets the tag `max(V, the tenant's last tag) + 1`,
 * capped at BullMQ's limit (where jobs fall back to FIFO). Nothing else resets a tenant's tag,
 * so a burst of adds racing each other still numbers each tenant's jobs 1, 2, 3… Once V passes
 * half the limit and nothing waits on the queue, the numbering starts again from 0.
 *
 * KEYS: [1] the queue's tag hash (tenant → last tag), [2] its clock (a sorted set whose member
 * `v` scores V), [3] BullMQ's prioritized set, [4] its wait list.
 * ARGV: [1] the tenant, [2] the priority limit, [3] the keys' time to live, s.
 */
const FAIR_TAG_SCRIPT = `
local limit = tonumber(ARGV[2])
local v = tonumber(redis.call('ZSCORE', KEYS[2], 'v') or '0')
if v >= limit / 2 and redis.call('ZCARD', KEYS[3]) == 0 and redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  v = 0
end
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local tag = math.min(math.max(v, last) + 1, limit)
redis.call('HSET', KEYS[1], ARGV[1], tag)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
return tag
`;

type FairRedis = Redis & {
  gatehouseFairTag(
    tags: string,
    clock: string,
    prioritized: string,
    wait: string,
    tenant: string,
    limit: number,
    ttl: number,
  ): Promise<number>;
};

/** The connection with the fair-tag script defined on it (once per connection; ioredis sends it by SHA). */
function fairRedis(connection: Redis): FairRedis {
  const r = connection as FairRedis;
  if (typeof r.gatehouseFairTag !== 'function') {
    connection.defineCommand('gatehouseFairTag', { numberOfKeys: 4, lua: FAIR_TAG_SCRIPT });
  }
  return r;
}

/** The queue's fairness keys: its tag hash and its clock, beside BullMQ's own keys of the queue. */
function fairKeys(q: QueueBase): { tags: string; clock: string; prioritized: string; wait: string } {
  const k = q.keys;
  const [base, prioritized, wait] = [k[''], k.prioritized, k.wait];
  if (base === undefined || prioritized === undefined || wait === undefined) throw new Error(`BullMQ queue ${q.name} has no key map`);
  return { tags: `${base}fair-tags`, clock: `${base}fair-clock`, prioritized, wait };
}

/**
 * The BullMQ priority (1 … {@link PRIORITY_LIMIT}; lower runs first) of the next job of tenant
 * `fairKey` on `queue`, so that tenants share the queue's workers in turn instead of first come,
 * first served: a tenant with 120 jobs waiting delays another tenant's next job by about one of
 * its own, not by 120. One Redis round trip (a script over the queue's keys). `undefined`
 * (plain FIFO) when the test-only switch `GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS=1` is set.
 * Scheduling only: the tenant named here is never authority for anything.
 * @throws what the Redis command throws (the caller's add would fail the same way).
 */
export async function fairPriority(queue: Queue, connection: Redis, fairKey: string): Promise<number | undefined> {
  if (testFaults().disableTenantFairness) return undefined;
  const k = fairKeys(queue);
  return fairRedis(connection).gatehouseFairTag(k.tags, k.clock, k.prioritized, k.wait, fairKey, PRIORITY_LIMIT, FAIR_TAGS_TTL_S);
}

/**
 * Forgets the per-tenant tags of `queue`, keeping its clock: after its queued jobs were removed
 * without starting (`gatehouse queues quarantine`), the tags they took would keep their tenants
 * behind the others until the clock passed them or the tags expired
 * (docs/decisions/0500-tenant-fair-queues.md). Every tenant's next job then starts at the clock;
 * jobs still on the queue keep their priorities. One Redis command.
 * @throws what the Redis command throws.
 */
export async function forgetFairTags(queue: QueueBase, connection: Redis): Promise<void> {
  await connection.del(fairKeys(queue).tags);
}

/**
 * Keeps the virtual time of `worker`'s queue: each job it starts with a priority moves the
 * queue's clock up to that priority (`ZADD … GT`, Redis ≥ 6.2), sent on `connection` without
 * waiting. A lost update only makes the next tags a little low, and the next start corrects it.
 * Every Gatehouse worker has it ({@link createWorker}).
 */
export function attachFairClock(worker: Worker, connection: Redis, log?: Logger): void {
  const { clock } = fairKeys(worker);
  worker.on('active', (job) => {
    const priority = job.opts.priority;
    if (!priority) return;
    connection
      .zadd(clock, 'GT', priority, 'v')
      .catch((err: unknown) => log?.debug({ err: (err as Error).message }, 'fair clock not advanced'));
  });
}
