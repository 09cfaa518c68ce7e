import { Router, type Response } from 'express';
import { LastEventIdSchema, STREAM_CLOSED_EVENT_NAME, WORKFLOW_EVENT_NAME, type StreamClosed } from '@gatehouse/contracts';
import { isTerminal, readWorkflowEvents, type Db } from '@gatehouse/ledger';
import { TokenRevokedError, type VerifiedUserClaims } from '@gatehouse/credentials';
import { sendTooManyRequests, UserError, type AuthedRequest, type Logger, type TokenRevocationCheck } from '@gatehouse/platform';
import type { WorkflowEventHub } from '../domain/event-hub.ts';
import { ownWorkflow } from './workflows.router.ts';
import { DEFAULT_STREAM_LIMITS, StreamSlots, type StreamLimits } from './stream-slots.ts';

/** Timing of the event streams. */
export interface EventStreamConfig {
  db: Db;
  hub: WorkflowEventHub;
  log: Logger;
  /** Bounded re-read of the ledger, ms, in case a notification was missed. */
  pollMs: number;
  /** Comment line (`: heartbeat`) every this many ms, so proxies keep an idle stream open. */
  heartbeatMs: number;
  /** Open streams this process admits per user and per tenant (default {@link DEFAULT_STREAM_LIMITS}). */
  limits?: StreamLimits;
  /** The app's revocation check: every `pollMs` an open stream asks it whether its token was revoked since (ADR 0695). */
  revocations: TokenRevocationCheck;
}

/** Headers of an open event stream (and of the answer to a HEAD request of one). */
const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;

/** Seconds a client refused for too many streams is told to wait (`Retry-After`). */
const STREAM_RETRY_AFTER_S = 30;

/**
 * The last seq the client saw: `Last-Event-ID` header, else `?lastEventId=`, else 0.
 * @throws UserError 400 `bad_last_event_id` when it is not one non-negative integer (a repeated
 * query parameter is refused, never read as absent: that would replay from seq 1).
 */
function lastEventId(header: string | undefined, query: unknown): number {
  if (header === undefined && query !== undefined && typeof query !== 'string')
    throw new UserError('bad_last_event_id', 'lastEventId must be given once, as a non-negative integer (an event seq)');
  const raw = header ?? (query as string | undefined);
  if (raw === undefined || raw === '') return 0;
  const parsed = LastEventIdSchema.safeParse(raw.trim());
  if (!parsed.success || !/^\d+$/.test(raw.trim()))
    throw new UserError('bad_last_event_id', 'Last-Event-ID must be a non-negative integer (an event seq)');
  return parsed.data;
}

/** Longest delay `setTimeout` takes, ms (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` once when the clock passes `expS` (seconds since the epoch; at once when already
 * past; never for a non-finite one), re-arming past the timer's longest delay.
 * @returns a function cancelling it.
 */
function atExpiry(expS: number | undefined, fn: () => void): () => void {
  if (expS === undefined || !Number.isFinite(expS)) return () => {};
  let timer: NodeJS.Timeout;
  const arm = (): void => {
    const left = expS * 1000 - Date.now();
    timer = left > MAX_TIMER_MS ? setTimeout(arm, MAX_TIMER_MS) : setTimeout(fn, Math.max(0, left));
  };
  arm();
  return () => clearTimeout(timer);
}

/**
 * Asks `revocations` every `everyMs` whether `user`'s token was revoked, and calls `onRevoked` once
 * when it was (docs/decisions/0695-user-tokens-can-be-revoked.md). A check that cannot read the
 * revocations (the ledger is down) leaves the stream open — it only reads, and its reads fail as
 * well — and the next tick asks again.
 * @returns a function cancelling it.
 */
function whileNotRevoked(
  revocations: TokenRevocationCheck,
  user: VerifiedUserClaims,
  everyMs: number,
  log: Logger,
  onRevoked: () => void,
): () => void {
  const timer = setInterval(() => {
    revocations.assertNotRevoked(user).catch((err: unknown) => {
      if (err instanceof TokenRevokedError) onRevoked();
      else log.warn({ err: (err as Error).message }, 'event stream revocation check failed');
    });
  }, everyMs);
  return () => clearInterval(timer);
}

/**
 * `GET /v1/workflows/:id/events`: the workflow's events as Server-Sent Events
 * (docs/product/public-contract.md#pushed-updates, docs/decisions/0250-pushed-workflow-events.md).
 * Same tenant scope as the read (another tenant's workflow is 404). Each event is
 * `id: <seq>`, `event: workflow.updated`, `data: <WorkflowEvent JSON>`; events after
 * `Last-Event-ID` are replayed from the ledger, then live ones follow (a Postgres notification
 * from any replica, or the bounded poll). The stream ends after a terminal event; a request for
 * a terminal workflow with nothing after `Last-Event-ID` is 204 (an EventSource stops reconnecting);
 * for a live one, a `Last-Event-ID` past its last event is 400 `bad_last_event_id`.
 * Past the open-stream limits of this process (`cfg.limits`), 429 `too_many_streams_user` or
 * `too_many_streams_tenant` with `Retry-After`; the slot is freed when the stream closes.
 * A stream lives no longer than its bearer token: at the token's `exp` it ends with a
 * `stream.closed` event `{"reason":"token_expired"}` (docs/decisions/0688-every-bearer-token-expires.md),
 * and within `pollMs` plus the revocation cache's bound after an operator revoked it, with
 * `{"reason":"token_revoked"}` (docs/decisions/0695-user-tokens-can-be-revoked.md).
 * Until the stream opens the request is bounded by the app's response deadline (503); a request
 * answered so meanwhile, or dropped by its client while the workflow was read, opens no stream and
 * takes no slot. A HEAD request is answered what a GET would get up to the stream's headers (its
 * 200 checks the limits too) and ends there: no stream, no slot (docs/decisions/0720-head-of-an-event-stream.md).
 */
export function eventsRouter(cfg: EventStreamConfig): Router {
  const router = Router();
  const slots = new StreamSlots(cfg.limits ?? DEFAULT_STREAM_LIMITS);
  router.get('/v1/workflows/:id/events', async (req, res) => {
    const { user } = req as unknown as AuthedRequest;
    const wf = await ownWorkflow(cfg.db, String(req.params.id), user.tenant);
    // The response deadline answered 503 while the ledger hung, or the client dropped the request
    // meanwhile (its `close` has fired, so a slot taken now would never be freed): no stream, no slot.
    if (res.headersSent || req.socket.destroyed) return;
    const last = lastEventId(req.get('last-event-id'), req.query.lastEventId);
    // A workflow that already ended and whose last event the client has: nothing will follow, and
    // 204 tells an EventSource to stop reconnecting.
    if (isTerminal(wf.state) && wf.event_seq <= last) return void res.status(204).end();
    // An id past the run's last event names no event it sent: the stream would never send the
    // terminal event, so never end. Only a wrong id gets here (events are read after commit).
    if (last > wf.event_seq)
      throw new UserError('bad_last_event_id', `Last-Event-ID ${last} is past this workflow's last event (${wf.event_seq})`);
    const slot = slots.take(user.tenant, user.sub);
    if ('refused' in slot)
      return sendTooManyRequests(
        res,
        STREAM_RETRY_AFTER_S,
        `too_many_streams_${slot.refused}`,
        `at most ${slot.limit} open event streams per ${slot.refused} on this server; close one or retry after ${STREAM_RETRY_AFTER_S} s`,
      );
    res.status(200).set(STREAM_HEADERS);
    // HEAD (express routes it here): the stream's status and headers, and done — a body HEAD cannot
    // carry would keep the connection unfinished and the slot taken (ADR 0720).
    if (req.method === 'HEAD') {
      slot.release();
      return void res.end();
    }
    res.flushHeaders();
    res.write(`retry: ${Math.max(1000, Math.min(cfg.pollMs, 5000))}\n\n`);
    const stream = new EventStream(cfg, res, wf.id, last);
    const unsubscribe = cfg.hub.subscribe(wf.id, (seq) => (seq < 0 ? stream.onEnd() : stream.pump()));
    const poll = setInterval(() => stream.pump(), cfg.pollMs);
    const beat = setInterval(() => res.write(': heartbeat\n\n'), cfg.heartbeatMs);
    const cancelExpiry = atExpiry(user.exp, () => stream.close({ reason: 'token_expired' }));
    const cancelRevocation = whileNotRevoked(cfg.revocations, user, cfg.pollMs, cfg.log, () => stream.close({ reason: 'token_revoked' }));
    const stop = (): void => {
      slot.release();
      unsubscribe();
      clearInterval(poll);
      clearInterval(beat);
      cancelExpiry();
      cancelRevocation();
    };
    res.on('close', stop);
    stream.onEnd = () => {
      stop();
      res.end();
    };
    stream.pump();
  });
  return router;
}

/** One open stream: writes every event after `last`, one read at a time, and ends after a terminal one. */
class EventStream {
  onEnd: () => void = () => {};
  #reading = false;
  #again = false;
  #ended = false;
  readonly #cfg: EventStreamConfig;
  readonly #res: Response;
  readonly #workflowId: string;
  #last: number;

  constructor(cfg: EventStreamConfig, res: Response, workflowId: string, last: number) {
    this.#cfg = cfg;
    this.#res = res;
    this.#workflowId = workflowId;
    this.#last = last;
  }

  /** Ends the stream before its terminal event: writes a `stream.closed` event naming `why`, then ends. */
  close(why: StreamClosed): void {
    if (this.#ended || this.#res.writableEnded) return;
    this.#ended = true;
    this.#res.write(`event: ${STREAM_CLOSED_EVENT_NAME}\ndata: ${JSON.stringify(why)}\n\n`);
    this.onEnd();
  }

  /** Reads and writes what is new; a call during a read makes that read go once more. Never throws. */
  pump(): void {
    if (this.#ended) return;
    if (this.#reading) {
      this.#again = true;
      return;
    }
    this.#reading = true;
    void this.#drain().finally(() => {
      this.#reading = false;
      if (this.#again && !this.#ended) {
        this.#again = false;
        this.pump();
      }
    });
  }

  async #drain(): Promise<void> {
    try {
      for (;;) {
        const events = await readWorkflowEvents(this.#cfg.db, this.#workflowId, this.#last);
        for (const e of events) {
          if (this.#ended || this.#res.writableEnded) return;
          this.#res.write(`id: ${e.seq}\nevent: ${WORKFLOW_EVENT_NAME}\ndata: ${e.json}\n\n`);
          this.#last = e.seq;
          if (isTerminal(e.state) && e.seq === events.at(-1)!.seq) {
            this.#ended = true;
            this.onEnd();
            return;
          }
        }
        if (events.length < 500) return;
      }
    } catch (err) {
      // The ledger is unreachable: keep the stream; the next poll or notification reads again.
      this.#cfg.log.warn({ err: (err as Error).message, workflowId: this.#workflowId }, 'event stream read failed');
    }
  }
}
