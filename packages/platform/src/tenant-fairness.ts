import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { testFaults } from '@gatehouse/contracts';

/** BullMQ's highest priority number (its lowest priority): `2^21 - 1`. */
export const PRIORITY_LIMIT = 2 ** 21 - 1;

/** How long a queue's per-tenant tags live after their last job, s: a tenant quiet this long starts afresh. */
export const FAIR_TAGS_TTL_S = 3600;

/**
 * Start-time fair queuing over BullMQ priorities (docs/decisions/0500-tenant-fair-queues.md).
 * The queue's virtual time V is the priority of the job at the head of its prioritized set
 * (BullMQ scores a prioritized job `priority * 2^32 + counter`); with nothing waiting, the
 * numbering restarts and every tenant's tag is forgotten. A tenant's job gets the tag
 * `max(V, the tenant's last tag) + 1`, capped at BullMQ's limit (where jobs fall back to FIFO).
 *
 * KEYS: [1] the queue's tag hash (tenant → last tag), [2] BullMQ's prioritized set, [3] its wait list.
 * ARGV: [1] the tenant, [2] the priority limit, [3] the hash's time to live, s.
 */
const FAIR_TAG_SCRIPT = `
local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local v = 0
if head[2] then
  v = math.floor(tonumber(head[2]) / 4294967296)
elseif redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
end
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local tag = math.min(math.max(v, last) + 1, tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], ARGV[1], tag)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return tag
`;

type FairRedis = Redis & {
  gatehouseFairTag(tags: string, prioritized: string, wait: string, tenant: string, limit: number, ttl: number): Promise<number>;
};

/** The connection with the fair-tag script defined on it (once per connection; ioredis sends it by SHA). */
function fairRedis(connection: Redis): FairRedis {
  const r = connection as FairRedis;
  if (typeof r.gatehouseFairTag !== 'function') {
    connection.defineCommand('gatehouseFairTag', { numberOfKeys: 3, lua: FAIR_TAG_SCRIPT });
  }
  return r;
}

/**
 * The BullMQ priority (1 … {@link PRIORITY_LIMIT}; lower runs first) of the next job of tenant
 * `fairKey` on `queue`, so that tenants share the queue's workers in turn instead of first come,
 * first served: a tenant with 120 jobs waiting delays another tenant's next job by about one of
 * its own, not by 120. One Redis round trip (a script over the queue's own keys). `undefined`
 * (plain FIFO) when the test-only switch `GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS=1` is set.
 * Scheduling only: the tenant named here is never authority for anything.
 * @throws what the Redis command throws (the caller's add would fail the same way).
 */
export async function fairPriority(queue: Queue, connection: Redis, fairKey: string): Promise<number | undefined> {
  if (testFaults().disableTenantFairness) return undefined;
  const k = queue.keys;
  const [base, prioritized, wait] = [k[''], k.prioritized, k.wait];
  if (base === undefined || prioritized === undefined || wait === undefined) throw new Error(`BullMQ queue ${queue.name} has no key map`);
  return fairRedis(connection).gatehouseFairTag(`${base}fair-tags`, prioritized, wait, fairKey, PRIORITY_LIMIT, FAIR_TAGS_TTL_S);
}
