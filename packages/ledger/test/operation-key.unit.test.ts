import { describe, expect, it } from 'vitest';
import { TICKET_KEY_SCHEME, ticketKeyStem, ticketOperationKey } from '../src/operations/operation-key.ts';

const run = (tenant: string, ticket_id: string) => ({ tenant, ticket_id });
/** The `Idempotency-Key` the systems of record take: 1–255 visible ASCII characters. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

describe('operation keys derived from the ticket (ADR 0789)', () => {
  it('is the same for the same tenant, ticket and version: a run started again for the ticket presents the same keys', () => {
    expect(ticketOperationKey(run('quillfeather', 'T-1'), 2)).toBe(ticketOperationKey(run('quillfeather', 'T-1'), 2));
    expect(ticketOperationKey(run('quillfeather', 'T-1'), 2)).toMatch(/^tk1-[0-9a-f]{64}:action:2$/);
  });

  it('differs by tenant, by ticket and by version (an amendment is a new version, so a new key)', () => {
    const keys = [
      ticketOperationKey(run('quillfeather', 'T-1'), 1),
      ticketOperationKey(run('quillfeather', 'T-1'), 2),
      ticketOperationKey(run('quillfeather', 'T-2'), 1),
      ticketOperationKey(run('northwind', 'T-1'), 1),
    ];
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('keeps the tenant and the ticket apart whatever characters they hold', () => {
    // Each pair would read the same as `<tenant>:<ticketId>` text.
    expect(ticketKeyStem('a', 'b:c')).not.toBe(ticketKeyStem('a:b', 'c'));
    expect(ticketKeyStem('t', 'x:action:1')).not.toBe(ticketKeyStem('t:x', 'action:1'));
    expect(ticketOperationKey(run('t', 'x:action:1'), 2)).not.toBe(ticketOperationKey(run('t', 'x'), 1));
    expect(ticketKeyStem('t', 'a"b')).not.toBe(ticketKeyStem('t', 'a\\"b'));
  });

  it('stays within the Idempotency-Key bounds for any ticket id, even inside a change cancel key', () => {
    for (const ticketId of ['T-1', 'x'.repeat(128), ':'.repeat(128), 'gatehouse/cancel:é ü\n\t=%', 'recon_' + 'z'.repeat(5000)]) {
      const key = ticketOperationKey(run('t'.repeat(300), ticketId), 99_999);
      expect(key).toMatch(IDEMPOTENCY_KEY);
      expect(`cancel:${key}.v99`).toMatch(IDEMPOTENCY_KEY);
      // `reconcile resolve --outcome <operationKey>=<shipmentId>` splits at the first `=`.
      expect(key).not.toContain('=');
    }
  });

  it('never has the form of a key of a former release or of an out-of-band request', () => {
    const key = ticketOperationKey(run('quillfeather', 'T-1'), 1);
    expect(key.startsWith(TICKET_KEY_SCHEME)).toBe(true);
    expect(key).not.toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-/);
    expect(key).not.toMatch(/^(cancel:|recon_|override:)/);
  });

  it('refuses a version that is not a positive integer', () => {
    for (const v of [0, -1, 1.5, Number.NaN]) expect(() => ticketOperationKey(run('t', 'T-1'), v)).toThrow(RangeError);
  });

  it('refuses a run read without its tenant or ticket id (their keys would all be one)', () => {
    expect(() => ticketOperationKey({ tenant: 'quillfeather' } as never, 1)).toThrow(TypeError);
    expect(() => ticketOperationKey({ ticket_id: 'T-1' } as never, 1)).toThrow(TypeError);
  });
});
