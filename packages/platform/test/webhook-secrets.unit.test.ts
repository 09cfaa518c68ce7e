import { describe, expect, it } from 'vitest';
import {
  localWebhookSecretKey,
  openWebhookSecret,
  sealWebhookSecret,
  webhookSecretKey,
  webhookSecretKeyProblems,
  WebhookSecretUnreadable,
} from '../src/index.ts';

// Webhook signing secrets sealed at rest (docs/decisions/0550-webhook-secrets-sealed-at-rest.md).
const SECRET = `whsec_${Buffer.from('s'.repeat(32)).toString('base64')}`;
const owner = { tenant: 'quillfeather', url: 'https://hooks.example.com/gatehouse' };
const key = webhookSecretKey('k'.repeat(40));

describe('webhook secrets at rest', () => {
  it('seal to a value that holds no part of the secret, with a fresh IV each time, and open back to it', () => {
    const a = sealWebhookSecret(SECRET, key, owner);
    const b = sealWebhookSecret(SECRET, key, owner);
    expect(a).toMatch(/^sealed:v1:[0-9a-f]{8}:/);
    expect(a).not.toBe(b);
    expect(a).not.toContain(SECRET.slice(6, 20));
    expect(openWebhookSecret(a, key, owner)).toBe(SECRET);
    expect(openWebhookSecret(b, key, owner)).toBe(SECRET);
  });

  it('refuse to open under another key, after a change, or on another endpoint; a row stored before sealing opens as is', () => {
    const sealed = sealWebhookSecret(SECRET, key, owner);
    expect(() => openWebhookSecret(sealed, localWebhookSecretKey(), owner)).toThrow(/sealed under key [0-9a-f]{8}, not the configured key/);
    const parts = sealed.split(':');
    parts[4] = Buffer.from('x'.repeat(Buffer.from(parts[4]!, 'base64url').length)).toString('base64url');
    expect(() => openWebhookSecret(parts.join(':'), key, owner)).toThrow(WebhookSecretUnreadable);
    expect(() => openWebhookSecret(sealed, key, { ...owner, url: 'https://evil.example.com/' })).toThrow(WebhookSecretUnreadable);
    expect(() => openWebhookSecret(sealed, key, { ...owner, tenant: 'northwind' })).toThrow(WebhookSecretUnreadable);
    expect(() => openWebhookSecret('plain-text', key, owner)).toThrow(WebhookSecretUnreadable);
    expect(openWebhookSecret(SECRET, key, owner)).toBe(SECRET);
  });

  it('production refuses a missing, default, weak or shared sealing key', () => {
    const hmac = 'h'.repeat(32);
    const check = (value: string | undefined) =>
      webhookSecretKeyProblems(
        { GATEHOUSE_WEBHOOK_SECRET_KEY: value ?? 'local-webhook-secret-key-change-me', GATEHOUSE_AUDIT_HMAC_KEY: hmac },
        value === undefined ? {} : { GATEHOUSE_WEBHOOK_SECRET_KEY: value },
      );
    expect(check(undefined)).toEqual([expect.stringMatching(/must be set/)]);
    expect(check('local-webhook-secret-key-change-me')).toEqual([expect.stringMatching(/must be set/)]);
    expect(check('short-but-16-chars')).toEqual([expect.stringMatching(/too weak/)]);
    expect(check(hmac)).toEqual([expect.stringMatching(/same value as GATEHOUSE_AUDIT_HMAC_KEY/)]);
    expect(check('w'.repeat(32))).toEqual([]);
  });
});
