import type { Express } from 'express';
import { sql } from 'kysely';
import { jwksVerifier, type JSONWebKeySet } from '@gatehouse/credentials';
import { createHttpApp, createLogger, finishApp, type Logger } from '@gatehouse/platform';
import type { StagingDb } from './db/staging.database.ts';
import { FaultBoard } from './faults/fault-board.service.ts';
import { changesRouter } from './http/changes.router.ts';
import { faultsRouter } from './http/faults.router.ts';
import { trustedKeysRouter } from './http/trusted-keys.router.ts';
import { mailRouter } from './http/mail.router.ts';
import { ordersRouter } from './http/orders.router.ts';
import { paymentsRouter } from './http/payments.router.ts';
import { requestsRouter } from './http/requests.router.ts';
import { ChangesRepository } from './repositories/changes.repository.ts';
import { MessagesRepository } from './repositories/messages.repository.ts';
import { OrdersRepository } from './repositories/orders.repository.ts';
import { RefundsRepository } from './repositories/refunds.repository.ts';
import { RequestLogRepository } from './repositories/request-log.repository.ts';
import { ReversalsRepository } from './repositories/reversals.repository.ts';
import { ShipmentsRepository } from './repositories/shipments.repository.ts';

/** Inputs of {@link createStagingApp}. */
export interface StagingAppOptions {
  /** Kysely over the database holding the `staging` schema (see `ensureStagingSchema`). */
  db: StagingDb;
  /**
   * The public keys verifying delegated tokens (the JWKS of `GATEHOUSE_DELEGATION_JWKS_PATH`, see
   * `readDelegationJwks`); published as they are at `GET /.well-known/jwks.json` (ADR 0761).
   */
  delegationJwks: JSONWebKeySet;
  /** Database holding the revocation epoch (`public.credential_epochs`); default `db`. */
  epochDb?: StagingDb;
  /** Request binding of tokens switched off (`GATEHOUSE_TEST_DISABLE_TOKEN_BINDING`, tests only). */
  tokenBindingDisabled?: boolean;
  /** Defaults to `createLogger('staging')`. */
  log?: Logger;
}

/**
 * Builds the staging systems of record (docs/product/public-contract.md#staging-read-back,
 * docs/product/design.md#synthetic-environment) as one express app: payments ledger, order system, mail, change service, fault
 * switches, request log, the delegation JWKS they trust (`/.well-known/jwks.json`), `/healthz` and `/readyz` (checks the database with `select 1`).
 * The caller mounts it (`listen`, supertest) and owns `db`; the schema must already exist.
 * @returns the app and its in-memory {@link FaultBoard} (tests may arm faults directly).
 */
export function createStagingApp(opts: StagingAppOptions): { app: Express; faults: FaultBoard } {
  const { db } = opts;
  const delegation = {
    keys: jwksVerifier(opts.delegationJwks),
    epochDb: opts.epochDb ?? db,
    bindingDisabled: opts.tokenBindingDisabled ?? false,
  };
  const log = opts.log ?? createLogger('staging');
  const faults = new FaultBoard();
  const requestLog = new RequestLogRepository(db);
  const orders = new OrdersRepository(db);
  const deps = { db, delegation, faults, requestLog, log, orders };

  const app = createHttpApp('staging', {
    db: async () => {
      await sql`select 1`.execute(db);
    },
  });
  app.use(paymentsRouter({ ...deps, refunds: new RefundsRepository(db), reversals: new ReversalsRepository(db) }));
  app.use(ordersRouter({ ...deps, shipments: new ShipmentsRepository(db) }));
  app.use(mailRouter({ ...deps, messages: new MessagesRepository(db) }));
  app.use(changesRouter({ ...deps, changes: new ChangesRepository(db) }));
  app.use(trustedKeysRouter(opts.delegationJwks));
  app.use(faultsRouter(faults));
  app.use(requestsRouter(requestLog));
  finishApp(app, log);
  return { app, faults };
}
