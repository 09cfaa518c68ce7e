import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { knownMigrations, migrate, migrateOneDown } from '@gatehouse/ledger';
import type { TestDatabase } from '@gatehouse/test-harness';
import { createHttpApp, finishApp } from '../src/http.ts';
import { closeServer, listen } from '../src/http-server.ts';
import { SCHEMA_CHECK_TTL_MS } from '../src/release-check.ts';
import type { ServiceContext } from '../src/service-context.ts';
import { probeContext, type ProbeContext } from './support/probe-context.ts';

// A service boots only on a database holding every migration of its code (release-check.ts);
// `/readyz` keeps saying so while it runs: after a `gatehouse migrate down` under a running
// service it answers 503 naming the migration and `gatehouse migrate up`, and ready again after.

let probe: ProbeContext;
let t: TestDatabase;
let ctx: ServiceContext<unknown>;

beforeAll(async () => {
  probe = await probeContext('schema-probe', { migrate: true });
  ({ t, ctx } = probe);
});
afterAll(() => probe?.close());

type Readiness = { status: number; body: { ready: boolean; failing?: Record<string, string> } };

/** Polls `/readyz` until it answers `status` (the schema answer is cached for SCHEMA_CHECK_TTL_MS). */
async function readyzUntil(port: number, status: number): Promise<Readiness> {
  const deadline = Date.now() + SCHEMA_CHECK_TTL_MS + 10_000;
  for (;;) {
    const res = await fetch(`http://127.0.0.1:${port}/readyz`);
    const r = { status: res.status, body: (await res.json()) as Readiness['body'] };
    if (r.status === status || Date.now() > deadline) return r;
    await new Promise((done) => setTimeout(done, 250));
  }
}

describe('/readyz checks the database schema', () => {
  it('503 naming the migration and `migrate up` after a migrate down; ready again after migrate up', { timeout: 60_000 }, async () => {
    const app = finishApp(createHttpApp('schema-probe', ctx.readyChecks), ctx.log);
    const { server, port } = await listen(app, 0);
    try {
      expect(await readyzUntil(port, 200)).toEqual({ status: 200, body: { ready: true, service: 'schema-probe' } });

      const down = await migrateOneDown(t.db as never);
      expect(down).toBe(knownMigrations().at(-1));
      const r = await readyzUntil(port, 503);
      expect(r.status).toBe(503);
      expect(Object.keys(r.body.failing ?? {})).toEqual(['schema']);
      expect(r.body.failing?.schema).toContain(`migration(s) not applied: ${down} (run gatehouse migrate up)`);

      await migrate(t.db as never, 'up');
      expect(await readyzUntil(port, 200)).toEqual({ status: 200, body: { ready: true, service: 'schema-probe' } });
    } finally {
      await closeServer(server);
    }
  });
});
