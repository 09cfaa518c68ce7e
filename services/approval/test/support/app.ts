import type { Express } from 'express';
import type { Db } from '@gatehouse/ledger';
import { createLogger, type Logger, type OutboxRelay } from '@gatehouse/platform';
import { createApprovalApp, type ApprovalAppOptions } from '../../src/index.ts';

/** The local HS256 secret the test app verifies bearer tokens with (sign users' tokens with it). */
export const SECRET = 'local-auth-secret-change-me';

/** The local default audit HMAC key (the key the service's local configuration uses). */
const AUDIT_HMAC_KEY = 'local-audit-hmac-key-change-me';

/** A relay whose `publish` does nothing: a decision enqueues no job in these tests. */
const quietRelay = { publish: async () => undefined } as unknown as OutboxRelay;

/**
 * The approval app as the service tests build it: over `db` (a `Db`, e.g. `createTestDatabase().db`
 * or a pool through a proxy), a relay that publishes nothing, the local audit key, bearer tokens
 * verified with {@link SECRET}, no local chooser secret (tokens are pasted), a session cookie not
 * marked `Secure`, and a logger named `log` (or `log` itself when it is a `Logger`).
 * `overrides` replace any of those options or add others (e.g. `responseDeadlineMs`).
 * Returns the express app; the caller listens (`listen`, supertest) and owns `db`.
 */
export function testApprovalApp(db: Db, log: string | Logger, overrides: Partial<ApprovalAppOptions> = {}): Express {
  return createApprovalApp({
    db,
    relay: quietRelay,
    auditHmacKey: AUDIT_HMAC_KEY,
    verifier: { secret: SECRET },
    localSecret: null,
    secureCookie: false,
    log: typeof log === 'string' ? createLogger(log) : log,
    ...overrides,
  });
}
