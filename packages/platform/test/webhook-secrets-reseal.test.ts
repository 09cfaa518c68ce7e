import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { openWebhookSecret, resealWebhookSecrets, sealWebhookSecret, webhookSecretKey, webhookSecretKeyOf } from '../src/index.ts';

// A key rotation of the webhook secrets' sealing key (docs/decisions/0550-webhook-secrets-sealed-at-rest.md):
// the new key seals, the previous one still opens, and ops reseals at boot what the previous key or no key sealed.
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const OLD = 'o'.repeat(40);
const NEW = 'n'.repeat(40);
const secretOf = (i: number) => `whsec_${Buffer.from(String(i).repeat(32)).toString('base64')}`;

describe('rotating the sealing key', () => {
  it('a previous key still opens what it sealed; resealing moves every readable secret to the current key and leaves the rest, counted', async () => {
    const old = webhookSecretKey(OLD);
    const ring = webhookSecretKeyOf({ GATEHOUSE_WEBHOOK_SECRET_KEY: NEW, GATEHOUSE_WEBHOOK_SECRET_KEYS_PREVIOUS: ` ${OLD} ,` });
    expect(ring.previous?.map((k) => k.id)).toEqual([old.id]);
    const owner = (i: number) => ({ tenant: 'quillfeather', url: `https://hooks.example.com/${i}` });
    const stored = [
      sealWebhookSecret(secretOf(1), old, owner(1)), // sealed before the rotation
      secretOf(2), // stored before sealing existed
      sealWebhookSecret(secretOf(3), ring, owner(3)), // sealed after it
      sealWebhookSecret(secretOf(4), webhookSecretKey('x'.repeat(40)), owner(4)), // a key nobody configured
    ];
    expect(openWebhookSecret(stored[0]!, ring, owner(1))).toBe(secretOf(1));
    for (const [i, secret] of stored.entries())
      await t.db
        .insertInto('webhook_endpoints')
        .values({ ...owner(i + 1), secret, created_by: 'ops-gus' })
        .execute();

    expect(await resealWebhookSecrets(t.db, ring)).toEqual({ resealed: 2, unreadable: 1 });
    const rows = await t.db.selectFrom('webhook_endpoints').select(['tenant', 'url', 'secret']).orderBy('url').execute();
    const current = webhookSecretKey(NEW); // no previous key: only what is resealed opens
    for (const i of [1, 2, 3]) {
      const row = rows[i - 1]!;
      expect(row.secret).toMatch(new RegExp(`^sealed:v1:${ring.id}:`));
      expect(openWebhookSecret(row.secret, current, row)).toBe(secretOf(i));
    }
    expect(rows[2]!.secret).toBe(stored[2]); // already under the current key: untouched
    expect(rows[3]!.secret).toBe(stored[3]);
    // A second pass (another ops replica at boot) finds nothing left to do.
    expect(await resealWebhookSecrets(t.db, ring)).toEqual({ resealed: 0, unreadable: 1 });
  });
});
