import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetTestFaultsForTests } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import { opsAppFixture, SECRET } from './support/ops-app.ts';

// A tenant's active webhook endpoints are capped (every workflow event of the tenant becomes one
// delivery per endpoint): past the cap, 409 too_many_webhooks and nothing written. Registrations
// of one tenant are serialized by the tenant's lock, so concurrent ones at the cap cannot all
// pass the count; with the lock removed (GATEHOUSE_TEST_DISABLE_WEBHOOK_CAP_LOCK) they do.

const CAP = 3;
let ops: string;

const app = opsAppFixture('ops-webhook-cap-test', () => ({ maxWebhooksPerTenant: CAP }));
beforeAll(async () => {
  ops = await tokenFor('ops-gus', SECRET);
});
afterAll(async () => {
  delete process.env.GATEHOUSE_TEST_DISABLE_WEBHOOK_CAP_LOCK;
  resetTestFaultsForTests();
});
beforeEach(async () => {
  await app.db().deleteFrom('webhook_endpoints').execute();
});

const register = (tenant: string, n: number) =>
  fetch(`${app.url()}/api/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ops}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tenant, url: `http://127.0.0.1:9/hook-${n}` }),
  });
const active = async (tenant: string) =>
  (await app.db().selectFrom('webhook_endpoints').select('id').where('tenant', '=', tenant).where('disabled_at', 'is', null).execute())
    .length;

/** `n` registrations for `tenant` sent at once; their statuses. */
const burst = (tenant: string, n: number) => Promise.all(Array.from({ length: n }, (_, i) => register(tenant, i).then((r) => r.status)));

describe('webhook input the ledger cannot store, or no receiver could be at', () => {
  it('a NUL in the delivery filter, a NUL, a space or a control character in a URL: 400 with a reason, nothing written', async () => {
    const auth = { authorization: `Bearer ${ops}` };
    for (const [q, field] of [
      ['tenant=%00', 'tenant'],
      ['tenant=a%00b', 'tenant'],
      ['limit=1e1', 'limit'],
      ['limit=0x10', 'limit'],
    ] as const) {
      const r = await fetch(`${app.url()}/api/webhooks/deliveries?${q}`, { headers: auth });
      expect(r.status, q).toBe(400);
      // The refusal names the field it refused, so the caller knows which to fix.
      const { error } = (await r.json()) as { error: { reason: string; message: string; details?: Array<{ path: string }> } };
      expect(error.reason).toBe('invalid_query');
      expect(error.message, q).toContain(field);
      expect(
        error.details?.map((d) => d.path),
        q,
      ).toEqual([field]);
    }
    for (const bad of ['http://127.0.0.1:9/x\u0000', 'http://127.0.0.1:9/a b', 'http://127.0.0.1:9/\u0001', 'http://127.0.0.1:9/\ud800']) {
      const r = await fetch(`${app.url()}/api/webhooks`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ tenant: 'quillfeather', url: bad }),
      });
      expect(r.status, JSON.stringify(bad)).toBe(400);
    }
    expect(await active('quillfeather')).toBe(0);
  });
});

describe('webhook endpoints per tenant', () => {
  it('past the cap: 409 too_many_webhooks, nothing written; another tenant unaffected; a disabled one frees a place', async () => {
    for (let i = 0; i < CAP; i++) expect((await register('quillfeather', i)).status).toBe(201);
    const refused = await register('quillfeather', 99);
    expect(refused.status).toBe(409);
    const body = (await refused.json()) as { error: { reason: string; message: string } };
    expect(body.error.reason).toBe('too_many_webhooks');
    expect(body.error.message).toContain(`limit ${CAP}`);
    expect(await active('quillfeather')).toBe(CAP);
    const audits = await app.db().selectFrom('audit_outbox').select('event').execute();
    expect(audits.filter((a) => JSON.stringify(a.event).includes('webhook.registered'))).toHaveLength(CAP);

    expect((await register('northwind', 0)).status).toBe(201);

    const one = await app.db().selectFrom('webhook_endpoints').select('id').where('tenant', '=', 'quillfeather').executeTakeFirstOrThrow();
    const del = await fetch(`${app.url()}/api/webhooks/${one.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${ops}` } });
    expect(del.status).toBe(200);
    expect((await register('quillfeather', 100)).status).toBe(201);
  });

  it('8 registrations at once never leave more than the cap active (× 25)', async () => {
    for (let trial = 0; trial < 25; trial++) {
      await app.db().deleteFrom('webhook_endpoints').execute();
      const statuses = await burst('quillfeather', 8);
      expect(statuses.filter((s) => s === 201)).toHaveLength(CAP);
      expect(statuses.filter((s) => s === 409)).toHaveLength(8 - CAP);
      expect(await active('quillfeather')).toBe(CAP);
    }
  });

  it('control removed (no tenant lock): concurrent registrations pass the count together', async () => {
    const env = process.env.GATEHOUSE_ENV;
    process.env.GATEHOUSE_ENV = 'test';
    process.env.GATEHOUSE_TEST_DISABLE_WEBHOOK_CAP_LOCK = '1';
    resetTestFaultsForTests();
    try {
      let over = 0;
      for (let trial = 0; trial < 25 && over === 0; trial++) {
        await app.db().deleteFrom('webhook_endpoints').execute();
        await burst('quillfeather', 8);
        if ((await active('quillfeather')) > CAP) over++;
      }
      expect(over).toBeGreaterThan(0);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_WEBHOOK_CAP_LOCK;
      if (env === undefined) delete process.env.GATEHOUSE_ENV;
      else process.env.GATEHOUSE_ENV = env;
      resetTestFaultsForTests();
    }
  });
});

describe('DELETE /api/webhooks/:id with an id that is no uuid', () => {
  const del = (id: string) => fetch(`${app.url()}/api/webhooks/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${ops}` } });

  it('36 dashes, hex without dashes or a non-hex digit: 404 not_found (never sent to the uuid column)', async () => {
    for (const id of ['-'.repeat(36), 'not-a-uuid', '0123456789abcdef0123456789abcdef0123', '0000000g-0000-4000-8000-000000000000']) {
      const r = await del(id);
      expect(r.status, id).toBe(404);
      expect(((await r.json()) as { error: { reason: string } }).error.reason, id).toBe('not_found');
    }
  });

  it('the same endpoint named in capitals, as the uuid column reads it: disabled (200)', async () => {
    expect((await register('quillfeather', 1)).status).toBe(201);
    const one = await app.db().selectFrom('webhook_endpoints').select('id').executeTakeFirstOrThrow();
    expect((await del(one.id.toUpperCase())).status).toBe(200);
    expect(await active('quillfeather')).toBe(0);
  });
});
