import pg from 'pg';
import { WORKFLOW_EVENTS_CHANNEL } from '@gatehouse/ledger';
import type { Logger } from '@gatehouse/platform';

/**
 * Called when the ledger says a workflow has a new event (its seq; 0 after a reconnect: re-read),
 * or with -1 when the process shuts down (end the stream; the client resumes elsewhere).
 */
export type EventListener = (seq: number) => void;

/**
 * Fans Postgres notifications of new workflow events (channel `gatehouse_workflow_events`,
 * payload `<workflowId>:<seq>`, sent at the commit of the transition on whichever replica made
 * it) out to the SSE streams this process holds (docs/decisions/0250-pushed-workflow-events.md).
 * One dedicated connection per process; when it is lost it reconnects with backoff (0.5 s
 * doubling to 15 s) and tells every subscriber to re-read, so a notification missed meanwhile
 * costs at most a re-read — the streams also poll the ledger on a bounded interval.
 */
export class WorkflowEventHub {
  readonly #url: string;
  readonly #log: Logger;
  readonly #subs = new Map<string, Set<EventListener>>();
  #client: pg.Client | undefined;
  #closed = false;
  #retryMs = 500;
  #timer: NodeJS.Timeout | undefined;

  constructor(databaseUrl: string, log: Logger) {
    this.#url = databaseUrl;
    this.#log = log;
  }

  /** Connects and listens; never throws (a failure schedules a reconnect). */
  async start(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({ connectionString: this.#url });
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client, new Error('connection ended')));
    client.on('notification', (n) => {
      if (n.channel !== WORKFLOW_EVENTS_CHANNEL || !n.payload) return;
      const [workflowId, seq] = n.payload.split(':');
      for (const fn of this.#subs.get(workflowId!) ?? []) fn(Number(seq));
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${WORKFLOW_EVENTS_CHANNEL}`);
      this.#client = client;
      this.#retryMs = 500;
      // Anything committed while we were not listening: every stream re-reads once.
      for (const set of this.#subs.values()) for (const fn of set) fn(0);
    } catch (err) {
      this.#lost(client, err as Error);
    }
  }

  #lost(client: pg.Client, err: Error): void {
    if (this.#client && this.#client !== client) return; // an old connection's late event
    this.#client = undefined;
    client.removeAllListeners('end');
    client.end().catch(() => {});
    if (this.#closed || this.#timer) return;
    this.#log.warn({ err: err.message, retryMs: this.#retryMs }, 'workflow event listener lost; streams poll until it is back');
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.start();
    }, this.#retryMs);
    this.#retryMs = Math.min(this.#retryMs * 2, 15_000);
  }

  /** Calls `fn` on every new event of `workflowId` (and once after a reconnect); returns the unsubscribe. */
  subscribe(workflowId: string, fn: EventListener): () => void {
    let set = this.#subs.get(workflowId);
    if (!set) this.#subs.set(workflowId, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (!set.size) this.#subs.delete(workflowId);
    };
  }

  /** Number of open subscriptions (for tests and metrics). */
  get subscriptions(): number {
    let n = 0;
    for (const set of this.#subs.values()) n += set.size;
    return n;
  }

  /** Stops listening for good and tells every stream to end (-1). */
  async close(): Promise<void> {
    this.#closed = true;
    for (const set of [...this.#subs.values()]) for (const fn of [...set]) fn(-1);
    clearTimeout(this.#timer);
    const c = this.#client;
    this.#client = undefined;
    if (c) {
      c.removeAllListeners('end');
      await c.end().catch(() => {});
    }
  }
}
