import request from 'supertest';
import type { Express } from 'express';
import { tokenFor } from '@gatehouse/cli';
import type { Db } from '@gatehouse/ledger';
import { createLogger, type OutboxRelay } from '@gatehouse/platform';
import { createApprovalApp } from '@gatehouse/approval';

/** The local HS256 secret the in-process approval app verifies tokens with. */
const SECRET = 'local-auth-secret-change-me';

/** An answer of the approval API: status and JSON body. */
export interface ApiAnswer {
  status: number;
  body: Record<string, unknown>;
}

/** The approval service's HTTP surface in this process, used as a given user of world.json. */
export interface ApprovalApi {
  app: Express;
  /** `GET /v1/approvals/:id` as `user`. */
  show(user: string, approvalId: string): Promise<ApiAnswer>;
  /** `GET /v1/approvals?status=pending` as `user`: the approval ids listed. */
  pending(user: string): Promise<string[]>;
  /** Reads the approval as `user`, then `POST /v1/approvals/:id/decision` with the version and digest read (as the inbox does). */
  decide(user: string, approvalId: string, decision?: 'approve' | 'deny'): Promise<ApiAnswer>;
}

/**
 * The approval service's app (the real routers and domain: authority, decision, views, inbox)
 * over `db`, in this process. Release overrides and remediations enqueue nothing when decided,
 * so its relay publishes nothing.
 */
export function approvalApi(db: Db): ApprovalApi {
  const relay = { publish: async () => {} } as unknown as OutboxRelay;
  const app = createApprovalApp({
    db,
    relay,
    auditHmacKey: 'test-audit-hmac-key-0123456789',
    verifier: { secret: SECRET },
    localSecret: null,
    secureCookie: false,
    log: createLogger('approval-test'),
  });
  const bearer = async (user: string) => `Bearer ${await tokenFor(user, SECRET)}`;
  const show = async (user: string, id: string): Promise<ApiAnswer> => {
    const r = await request(app)
      .get(`/v1/approvals/${id}`)
      .set('authorization', await bearer(user));
    return { status: r.status, body: r.body as Record<string, unknown> };
  };
  return {
    app,
    show,
    async pending(user) {
      const r = await request(app)
        .get('/v1/approvals')
        .query({ status: 'pending' })
        .set('authorization', await bearer(user));
      return (r.body as { approvals: Array<{ approvalId: string }> }).approvals.map((a) => a.approvalId);
    },
    async decide(user, id, decision = 'approve') {
      const shown = await show(user, id);
      const r = await request(app)
        .post(`/v1/approvals/${id}/decision`)
        .set('authorization', await bearer(user))
        .send({ decision, actionVersion: shown.body.actionVersion ?? 1, actionDigest: shown.body.actionDigest ?? '0'.repeat(64) });
      return { status: r.status, body: r.body as Record<string, unknown> };
    },
  };
}
