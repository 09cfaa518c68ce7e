import type { Request, RequestHandler, Response } from 'express';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorResponseOf, GatehouseError, type Logger } from '@gatehouse/platform';
import type { ArmedFault, FaultBoard, FaultTarget } from '../faults/fault-board.service.ts';
import type { RequestLogEntry, RequestLogRepository } from '../repositories/request-log.repository.ts';

/** What an effect handler answers: status, JSON body, extra headers, and a reason for the log. */
export interface EffectOutcome {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
  /** Recorded in `request_log.reason` (e.g. `idempotent_replay`); null for a plain success. */
  reason?: string | null;
}

/** Performs one effect request; throws errors of the tree (contracts' `GatehouseError`). */
export type EffectHandler = (req: Request) => Promise<EffectOutcome>;

/** Collaborators of every effect route. */
export interface EffectRouteDeps {
  faults: FaultBoard;
  requestLog: RequestLogRepository;
  log: Logger;
}

/** How often a hung request checks whether its server is closing, in ms. */
const HANG_POLL_MS = 50;

/**
 * Maps a thrown error to the answer: an error of the tree (`DelegationRejected` included) →
 * its status and body from the platform's one table (`errorResponseOf`); anything else → 500
 * `internal` (logged, internals not exposed).
 */
export function errorOutcome(err: unknown, log: Logger): EffectOutcome {
  if (err instanceof GatehouseError) {
    const answer = errorResponseOf(err)!;
    return { status: answer.status, body: answer.body, reason: err.reason };
  }
  log.error({ err }, 'effect request failed');
  return { status: 500, body: { error: { reason: 'internal', message: 'internal error' } }, reason: 'internal' };
}

/** The request-log fields known before the handler runs (best effort: input may be invalid). */
function describe(req: Request, target: FaultTarget): Omit<RequestLogEntry, 'status' | 'reason'> {
  const body = req.body as { orderId?: unknown } | undefined;
  const orderId = typeof body?.orderId === 'string' ? body.orderId : typeof req.params.id === 'string' ? req.params.id : null;
  const rawFence = req.get('x-fencing-token')?.trim();
  const fence = rawFence && /^\d{1,16}$/.test(rawFence) ? Number(rawFence) : null;
  return {
    target,
    method: req.method,
    path: req.originalUrl,
    orderId,
    idempotencyKey: req.get('idempotency-key') ?? null,
    fencingToken: fence !== null && Number.isSafeInteger(fence) ? fence : null,
  };
}

/** Keeps a hung request open until the client leaves or the server stops listening. */
function hang(req: Request): void {
  const socket = req.socket as Socket & { server?: Server };
  const server = socket.server;
  const timer = setInterval(() => {
    // server.close() flips `listening` at once but waits for open sockets: release ours.
    if (!server?.listening) socket.destroy();
  }, HANG_POLL_MS);
  timer.unref();
  socket.once('close', () => clearInterval(timer));
}

/**
 * Answers a fault that prevents the effect (`rate_limit`, `server_error`, `request_timeout`; `hang` answers nothing)
 * and returns the status sent (null for none); undefined when the request proceeds.
 */
function answerBlockingFault(fault: ArmedFault, res: Response): { status: number | null } | undefined {
  switch (fault.mode) {
    case 'rate_limit':
      res.set('Retry-After', String(Math.ceil(fault.retryAfterMs / 1000)));
      res.set('retry-after-ms', String(fault.retryAfterMs));
      res.status(429).json({ error: { reason: 'rate_limited', message: 'too many requests (injected fault)' } });
      return { status: 429 };
    case 'server_error':
      res.status(fault.status).json({ error: { reason: 'server_error', message: 'downstream failure (injected fault)' } });
      return { status: fault.status };
    case 'request_timeout':
      res.status(408).json({ error: { reason: 'request_timeout', message: 'the request was not read in time (injected fault)' } });
      return { status: 408 };
    case 'hang':
      return { status: null };
    default:
      return undefined;
  }
}

/**
 * Wraps an effect handler (a POST of one downstream) with the staging cross-cutting concerns:
 * fault switches of its `target` (docs/product/design.md#synthetic-environment), error mapping, and an
 * entry in `request_log` for every request, accepted or rejected — written before the answer,
 * so a client that sees any answer (or a lost one) can read the log back.
 */
export function effectRoute(deps: EffectRouteDeps, target: FaultTarget, handler: EffectHandler): RequestHandler {
  return async (req, res) => {
    const entry = describe(req, target);
    const record = async (status: number | null, reason: string | null): Promise<void> => {
      try {
        await deps.requestLog.record({ ...entry, status, reason });
      } catch (err) {
        deps.log.error({ err, target }, 'request log write failed');
      }
    };

    const fault = deps.faults.take(target);
    if (fault) {
      deps.log.info({ target, mode: fault.mode, path: entry.path }, 'fault applied');
      const blocked = answerBlockingFault(fault, res);
      if (blocked) {
        await record(blocked.status, `fault:${fault.mode}`);
        if (fault.mode === 'hang') hang(req);
        return;
      }
      if (fault.mode === 'latency') await sleep(fault.latencyMs);
    }

    let outcome: EffectOutcome;
    try {
      outcome = await handler(req);
    } catch (err) {
      outcome = errorOutcome(err, deps.log);
    }

    if (fault?.mode === 'commit_then_lose_response') {
      await record(outcome.status, `fault:${fault.mode}`);
      res.socket?.destroy();
      return;
    }
    await record(outcome.status, outcome.reason ?? null);
    if (outcome.headers) res.set(outcome.headers);
    res.status(outcome.status).json(outcome.body);
  };
}
