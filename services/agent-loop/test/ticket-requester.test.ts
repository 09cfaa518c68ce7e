import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { loadReleaseManifest } from '@gatehouse/contracts';
import { signUserToken } from '@gatehouse/credentials';
import { registerRelease } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, type OutboxRelay } from '@gatehouse/platform';
import { catalogDigest, toolsOfPack, type Pack } from '@gatehouse/tools';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { createIntakeApp, type PackSettings } from '../src/index.ts';

// A tenant's ticket id maps to one workflow, and that workflow is its requester's: a colleague
// sending the same ticket is told whose run it is (409), not handed it as their own (ADR 0661).

const SECRET = 'local-auth-secret-change-me';
let t: TestDatabase;
let server: Server;
let url: string;

function rel1Packs(): Record<Pack, PackSettings> {
  const m = loadReleaseManifest('rel-1');
  const of = (pack: Pack): PackSettings => ({
    policyRevision: m.policy[pack],
    catalogDigest: catalogDigest(toolsOfPack(pack)),
    budgets: m.budgets[pack],
  });
  return { support: of('support'), change: of('change') };
}

beforeAll(async () => {
  t = await createTestDatabase();
  await registerRelease(t.db, 'rel-1', loadReleaseManifest('rel-1'));
  const app = createIntakeApp({
    db: t.db,
    relay: { publish: async () => undefined } as unknown as OutboxRelay,
    release: 'rel-1',
    auditHmacKey: 'local-audit-hmac-key-change-me',
    packs: rel1Packs,
    verifier: { secret: SECRET },
    log: createLogger('intake-ticket-requester-test'),
  });
  const l = await listen(app, 0, '127.0.0.1');
  server = l.server;
  url = `http://127.0.0.1:${l.port}`;
});
afterAll(async () => {
  if (server) await closeServer(server);
  await t?.drop();
});

const tokenOf = (sub: string) => signUserToken({ sub, tenant: 'quillfeather', roles: ['rep'] }, SECRET);
const submit = async (
  sub: string,
  body: Record<string, unknown>,
): Promise<{ status: number; body: { workflowId?: string; error?: { reason: string; message: string } } }> => {
  const r = await fetch(`${url}/v1/tickets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await tokenOf(sub)}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: (await r.json()) as { workflowId?: string; error?: { reason: string; message: string } } };
};

describe('a ticket id sent again', () => {
  const body = { ticketId: 'T-shared', text: 'What is the status of order O-1001?' };

  it('by its requester with the same text: the same workflow', async () => {
    const a = await submit('rep-ana', body);
    const b = await submit('rep-ana', body);
    expect(a.status).toBe(202);
    expect(b.status).toBe(202);
    expect(b.body.workflowId).toBe(a.body.workflowId);
  });

  it('by a colleague of the tenant, same text: 409 ticket_conflict naming the workflow, nothing recorded', async () => {
    const [{ n: before }] = [
      await t.db
        .selectFrom('workflows')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow(),
    ];
    const mine = await t.db.selectFrom('workflows').select('id').where('ticket_id', '=', 'T-shared').executeTakeFirstOrThrow();
    const r = await submit('rep-ben', body);
    expect(r.status).toBe(409);
    expect(r.body.error?.reason).toBe('ticket_conflict');
    expect(r.body.error?.message).toContain('another user of your tenant');
    expect(r.body.error?.message).toContain(mine.id);
    const after = await t.db
      .selectFrom('workflows')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    expect(after.n).toBe(before);
  });
});
