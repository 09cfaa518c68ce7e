import type { Server } from 'node:http';
import express from 'express';
import { vi, type MockInstance } from 'vitest';
import type { Db } from '@gatehouse/ledger';
import { closeServer, createLogger, finishApp, listen, revocationCacheOf } from '@gatehouse/platform';
import { WorkflowEventHub } from '../../src/domain/event-hub.ts';
import { eventsRouter } from '../../src/http/events.router.ts';

/** The caller a test's stand-in for the bearer-token middleware sets on a request. */
export interface StreamCaller {
  sub: string;
  tenant: string;
  roles: string[];
}

/** A running events app: its base URL, the hub's `subscribe` spy, and how to close it. */
export interface EventsApp {
  base: string;
  subscribed: MockInstance<WorkflowEventHub['subscribe']>;
  close: () => Promise<void>;
}

/**
 * The agent loop's event-stream router (`GET /v1/workflows/:id/events`) over `db` (at `url`), on
 * an ephemeral loopback port, with a stand-in for the bearer-token middleware: `caller` names the
 * request's user (the middleware is tested elsewhere). The hub is not started, so streams fall
 * back to the ledger poll every `pollMs` ms; `limits` are the open-stream limits (ADR 0250).
 * @throws Error when the port cannot be bound.
 */
export async function startEventsApp(
  db: Db,
  url: string,
  opts: { logName: string; pollMs: number; limits: { perUser: number; perTenant: number }; caller: (req: express.Request) => StreamCaller },
): Promise<EventsApp> {
  const log = createLogger(opts.logName);
  const app = express();
  app.use((req, _res, next) => {
    Object.assign(req, { user: opts.caller(req) });
    next();
  });
  const hub = new WorkflowEventHub(url, log);
  const subscribed = vi.spyOn(hub, 'subscribe');
  const revocations = revocationCacheOf(db, 1000);
  app.use(eventsRouter({ db, log, hub, pollMs: opts.pollMs, heartbeatMs: 15_000, limits: opts.limits, revocations }));
  const { server, port }: { server: Server; port: number } = await listen(finishApp(app, log), 0, '127.0.0.1');
  return { base: `http://127.0.0.1:${port}`, subscribed, close: () => closeServer(server) };
}
