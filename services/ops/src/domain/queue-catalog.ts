import { readdirSync, readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import type { Redis } from 'ioredis';
import { queueContracts, queueName, redisGlobEscape, repoRoot } from '@gatehouse/contracts';
import type { Db } from '@gatehouse/ledger';
import { within } from '@gatehouse/platform';

/** Where the dashboard learned of a queue. */
export type QueueSource = 'manifest' | 'releases_table' | 'redis';

/** One BullMQ queue of one release (`<base>.<release>`, e.g. `executions.rel-1`). */
export interface QueueEntry {
  name: string;
  base: string;
  release: string;
  sources: QueueSource[];
}

/** Base names of every queue contract (`turns`, `proposals`, …); they contain no dot. */
export const QUEUE_BASES: readonly string[] = Object.keys(queueContracts);

/** Release ids as the environment allows them (packages/platform env `GATEHOUSE_RELEASE`). */
const RELEASE_ID = /^[a-z0-9][a-z0-9.-]{0,40}$/;

/**
 * Release ids of the manifests in `dir` (default the repository's `releases/`): each file's `id`
 * field, else its file name. Read leniently — a manifest the runtime would reject still has
 * queues an operator must see.
 */
export function manifestReleaseIds(dir = resolve(repoRoot, 'releases')): string[] {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.json'));
  } catch {
    return [];
  }
  const ids = new Set<string>();
  for (const f of files) {
    let id = basename(f, '.json');
    try {
      const parsed = JSON.parse(readFileSync(resolve(dir, f), 'utf8')) as { id?: unknown };
      if (typeof parsed.id === 'string') id = parsed.id;
    } catch {
      // unreadable manifest: fall back to its file name
    }
    if (RELEASE_ID.test(id)) ids.add(id);
  }
  return [...ids];
}

/** Release ids recorded in the `releases` table (empty when the table cannot be read). */
export async function recordedReleaseIds(db: Db): Promise<string[]> {
  try {
    return (await db.selectFrom('releases').select('id').execute()).map((r) => r.id).filter((id) => RELEASE_ID.test(id));
  } catch {
    return [];
  }
}

/** How long discovery waits for Redis's part (the whole SCAN) before it goes on without it, ms. */
export const DISCOVERY_REDIS_TIMEOUT_MS = 2000;

/**
 * Queue names `<base>.<release>` that have keys in Redis under `prefix` (BullMQ keys are
 * `<prefix>:<queue>:<suffix>`), for known bases only. One SCAN over the prefix's keys; once
 * `signal` is aborted no further SCAN page is asked for.
 * @throws Error when Redis fails a SCAN, or `signal`'s reason once it is aborted between pages.
 */
export async function redisQueueNames(redis: Redis, prefix: string, signal?: AbortSignal): Promise<string[]> {
  const found = new Set<string>();
  const head = `${prefix}:`;
  let cursor = '0';
  do {
    signal?.throwIfAborted();
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${redisGlobEscape(prefix)}:*.*:*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const name = key.slice(head.length).split(':')[0] ?? '';
      const dot = name.indexOf('.');
      if (dot > 0 && QUEUE_BASES.includes(name.slice(0, dot)) && RELEASE_ID.test(name.slice(dot + 1))) found.add(name);
    }
  } while (cursor !== '0');
  return [...found];
}

/** Inputs of {@link discoverQueues}. */
export interface DiscoveryOptions {
  db: Db;
  redis: Redis;
  /** BullMQ key prefix (`QUEUE_PREFIX`). */
  prefix: string;
  /** Folder of release manifests (default the repository's `releases/`). */
  releasesDir?: string;
  /** Bound on Redis's part, ms (default {@link DISCOVERY_REDIS_TIMEOUT_MS}). */
  redisTimeoutMs?: number;
  /**
   * The queues found before: when Redis's part is skipped, the ones Redis had shown are kept
   * (a queue does not leave the board because Redis is briefly away).
   */
  known?: readonly QueueEntry[];
  /** Told why Redis's part was skipped (connection not ready, an error, or no answer in time). */
  onRedisSkipped?: (why: string) => void;
}

/**
 * Every queue of every release: each contract base × each release of a manifest or of the
 * `releases` table, plus any `<base>.<release>` queue found in Redis under `prefix` (a release
 * whose manifest is gone may still hold jobs). Sorted by release, then base.
 *
 * Redis's part is bounded: it is skipped without sending a command when the connection's status
 * is not `ready` (commands would wait in ioredis's offline queue), and abandoned after
 * `redisTimeoutMs` or on an error (a Redis that accepts connections but answers nothing). Then the
 * Redis-found queues of `known` stand in for it; the next discovery tries Redis again. Never
 * rejects because of Redis.
 */
export async function discoverQueues(opts: DiscoveryOptions): Promise<QueueEntry[]> {
  const entries = new Map<string, QueueEntry>();
  const add = (base: string, release: string, source: QueueSource) => {
    const name = queueName(base, release);
    const e = entries.get(name) ?? { name, base, release, sources: [] };
    if (!e.sources.includes(source)) e.sources.push(source);
    entries.set(name, e);
  };
  for (const release of manifestReleaseIds(opts.releasesDir)) for (const base of QUEUE_BASES) add(base, release, 'manifest');
  for (const release of await recordedReleaseIds(opts.db)) for (const base of QUEUE_BASES) add(base, release, 'releases_table');
  for (const name of await redisPart(opts)) {
    const dot = name.indexOf('.');
    add(name.slice(0, dot), name.slice(dot + 1), 'redis');
  }
  return [...entries.values()].sort(
    (a, b) => a.release.localeCompare(b.release) || QUEUE_BASES.indexOf(a.base) - QUEUE_BASES.indexOf(b.base),
  );
}

/** Redis's part of {@link discoverQueues}: its queue names, or the Redis-found ones of `known` when Redis is not ready or does not answer in time. */
async function redisPart(opts: DiscoveryOptions): Promise<string[]> {
  const fallback = (why: string): string[] => {
    opts.onRedisSkipped?.(why);
    return (opts.known ?? []).filter((e) => e.sources.includes('redis')).map((e) => e.name);
  };
  if (opts.redis.status !== 'ready') return fallback(`redis connection is ${opts.redis.status}`);
  const abandon = new AbortController();
  try {
    return await within(redisQueueNames(opts.redis, opts.prefix, abandon.signal), opts.redisTimeoutMs ?? DISCOVERY_REDIS_TIMEOUT_MS);
  } catch (err) {
    abandon.abort(err);
    return fallback(`redis scan: ${(err as Error).message}`);
  }
}
