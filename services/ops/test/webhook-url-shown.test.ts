import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { takeAdvisoryLocks } from '@gatehouse/ledger';
import { localWebhookSecretKey, openWebhookSecret } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import { lockWaiters } from '@gatehouse/test-harness';
import { opsAppFixture, SECRET } from './support/ops-app.ts';

// A webhook URL's query often carries the receiver's token: once registered, no answer of the ops
// API shows it (the 201, the listing, a disable); deliveries still use
// it. The URL is stored normalised by the WHATWG parser — an internationalized host in ASCII — so
// a unicode and a punycode spelling of one receiver are one subscription: the second is
// 409 webhook_already_registered and writes nothing (ADR 0727).

const TOKEN = 's3cr3t-receiver-token';
const UNICODE = `https://Bücher.example/in?token=${TOKEN}&x=1`;
const PUNYCODE = `https://xn--bcher-kva.example:443/in?token=${TOKEN}&x=1`;
const STORED = `https://xn--bcher-kva.example/in?token=${TOKEN}&x=1`;
const SHOWN = 'https://xn--bcher-kva.example/in?[redacted]';
let ops: string;

const app = opsAppFixture('ops-webhook-url-test');
beforeAll(async () => {
  ops = await tokenFor('ops-gus', SECRET);
});
beforeEach(async () => {
  await app.db().deleteFrom('webhook_endpoints').execute();
});

const auth = () => ({ authorization: `Bearer ${ops}` });
const register = (hook: string, tenant = 'quillfeather') =>
  fetch(`${app.url()}/api/webhooks`, {
    method: 'POST',
    headers: { ...auth(), 'content-type': 'application/json' },
    body: JSON.stringify({ tenant, url: hook }),
  });
const rows = () => app.db().selectFrom('webhook_endpoints').selectAll().orderBy('created_at').execute();
const registeredAudits = async () =>
  (await app.db().selectFrom('audit_outbox').select('event').execute()).filter((a) =>
    JSON.stringify(a.event).includes('webhook.registered'),
  ).length;

describe('a webhook URL with a token in its query', () => {
  it('is stored whole and normalised, delivered to as stored, and shown without its query in every answer', async () => {
    const created = await register(UNICODE);
    const text = await created.text();
    expect(created.status, text).toBe(201);
    const body = JSON.parse(text) as { endpointId: string; url: string; secret: string };
    expect(body.url).toBe(SHOWN);
    expect(text).not.toContain(TOKEN);

    const [row] = await rows();
    expect(row!.url).toBe(STORED); // what deliveries POST to, token included
    // The secret is sealed to the stored URL, which the delivery worker opens it with.
    expect(openWebhookSecret(row!.secret, localWebhookSecretKey(), row!)).toBe(body.secret);

    const listing = await fetch(`${app.url()}/api/webhooks`, { headers: auth() });
    const listed = await listing.text();
    expect(listing.status).toBe(200);
    expect((JSON.parse(listed) as { webhooks: { url: string }[] }).webhooks.map((w) => w.url)).toEqual([SHOWN]);
    expect(listed).not.toContain(TOKEN);

    const disabled = await fetch(`${app.url()}/api/webhooks/${body.endpointId}`, { method: 'DELETE', headers: auth() });
    const disabledText = await disabled.text();
    expect(disabled.status).toBe(200);
    expect(JSON.parse(disabledText)).toMatchObject({ url: SHOWN });
    expect(disabledText).not.toContain(TOKEN);
  });

  it('a URL without a query is shown as stored', async () => {
    const created = await register('http://127.0.0.1:9/plain');
    expect(created.status).toBe(201);
    expect(((await created.json()) as { url: string }).url).toBe('http://127.0.0.1:9/plain');
  });
});

describe('a unicode and a punycode spelling of one receiver', () => {
  it('are one subscription: the second spelling is 409 webhook_already_registered, nothing written; another tenant or a disabled one is not', async () => {
    const first = await register(UNICODE);
    expect(first.status).toBe(201);
    const { endpointId } = (await first.json()) as { endpointId: string };
    const audits = await registeredAudits();
    for (const spelling of [PUNYCODE, UNICODE, 'https://BÜCHER.example/in?token=' + TOKEN + '&x=1']) {
      const again = await register(spelling);
      const text = await again.text();
      expect(again.status, spelling).toBe(409);
      const err = (JSON.parse(text) as { error: { reason: string; message: string } }).error;
      expect(err.reason).toBe('webhook_already_registered');
      expect(err.message).toContain(endpointId);
      expect(text).not.toContain(TOKEN);
    }
    expect((await rows()).map((r) => r.id)).toEqual([endpointId]);
    expect(await registeredAudits()).toBe(audits);

    // Another query is another receiver; another tenant has its own subscriptions.
    expect((await register(`https://xn--bcher-kva.example/in?token=other`)).status).toBe(201);
    expect((await register(PUNYCODE, 'northwind')).status).toBe(201);
    // Once disabled, the URL may be registered again.
    expect((await fetch(`${app.url()}/api/webhooks/${endpointId}`, { method: 'DELETE', headers: auth() })).status).toBe(200);
    expect((await register(PUNYCODE)).status).toBe(201);
  });

  it('a row stored before normalisation (a unicode host) is the same subscription as its punycode spelling', async () => {
    await app
      .db()
      .insertInto('webhook_endpoints')
      .values({ tenant: 'quillfeather', url: UNICODE, secret: 'whsec_old', created_by: 'ops-gus' })
      .execute();
    const again = await register(PUNYCODE);
    expect(again.status).toBe(409);
    const listed = await (await fetch(`${app.url()}/api/webhooks`, { headers: auth() })).text();
    expect((JSON.parse(listed) as { webhooks: { url: string }[] }).webhooks.map((w) => w.url)).toEqual([SHOWN]);
    expect(listed).not.toContain(TOKEN);
  });
});

describe('two spellings registered at once', () => {
  it('queued on the tenant lock together: one 201, one 409, one row (× 8)', async () => {
    for (let round = 0; round < 8; round++) {
      await app.db().deleteFrom('webhook_endpoints').execute();
      const { both } = await app
        .db()
        .transaction()
        .execute(async (trx) => {
          // The barrier: both registrations wait on the tenant's registration lock this transaction holds.
          await takeAdvisoryLocks(trx, ['webhook-endpoints:quillfeather']);
          const started = Promise.all([register(UNICODE), register(PUNYCODE)].map((p) => p.then((r) => r.status)));
          expect(await lockWaiters(app.db(), 2)).toBe(true);
          return { both: started };
        });
      expect((await both).sort()).toEqual([201, 409]);
      expect(await rows()).toHaveLength(1);
    }
  });
});
