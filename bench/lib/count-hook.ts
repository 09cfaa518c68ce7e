// Preloaded into every service process of a benchmark (NODE_OPTIONS=--import=<this file>) when
// BENCH_COUNTERS_DIR is set: counts Postgres round trips (every pg Client#query, BEGIN/COMMIT
// included) and Redis commands (every ioredis Redis#sendCommand) without touching service code,
// outgoing HTTP requests (global fetch), and writes the running totals to `<dir>/<pid>.json` every 200 ms and at exit.
import { createRequire } from 'node:module';
import { renameSync, writeFileSync } from 'node:fs';

/** Running totals of one process (see {@link import('./counters.ts').ProcessCounts}). */
const counts = { pg: 0, begin: 0, commit: 0, rollback: 0, redis: 0, http: 0 };
const dir = process.env.BENCH_COUNTERS_DIR;

if (dir) {
  // Resolve the very modules the services load (pnpm links one copy of each version).
  const pg = createRequire(new URL('../../packages/ledger/package.json', import.meta.url))('pg') as {
    Client: { prototype: { query: (...args: unknown[]) => unknown } };
  };
  const ioredis = createRequire(new URL('../../packages/platform/package.json', import.meta.url))('ioredis') as {
    Redis: { prototype: { sendCommand: (...args: unknown[]) => unknown } };
  };
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: unknown, ...args: unknown[]) {
    counts.pg++;
    const first = args[0] as string | { text?: string } | undefined;
    const text = (typeof first === 'string' ? first : (first?.text ?? '')).slice(0, 20).trimStart().toLowerCase();
    if (text.startsWith('begin') || text.startsWith('start transaction')) counts.begin++;
    else if (text.startsWith('commit')) counts.commit++;
    else if (text.startsWith('rollback')) counts.rollback++;
    return query.apply(this, args);
  };
  const send = ioredis.Redis.prototype.sendCommand;
  ioredis.Redis.prototype.sendCommand = function (this: unknown, ...args: unknown[]) {
    counts.redis++;
    return send.apply(this, args);
  };
  // Outgoing HTTP requests (undici fetch: the order reads and the adapters' calls).
  const fetch0 = globalThis.fetch;
  globalThis.fetch = (...args: Parameters<typeof fetch>) => {
    counts.http++;
    return fetch0(...args);
  };
  const file = `${dir}/${process.pid}.json`;
  const flush = (): void => {
    try {
      writeFileSync(`${file}.tmp`, JSON.stringify({ pid: process.pid, ...counts }));
      renameSync(`${file}.tmp`, file);
    } catch {
      // the benchmark's folder is gone (it ended): nothing to report to
    }
  };
  setInterval(flush, 200).unref();
  process.on('exit', flush);
}
