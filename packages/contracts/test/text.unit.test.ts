import { describe, expect, it } from 'vitest';
import { escapeUnstorable, isStorableText, TicketRequestSchema } from '../src/index.ts';

describe('text the ledger can store', () => {
  it('NUL and lone surrogates are not storable; tabs, line breaks and paired surrogates are', () => {
    expect(isStorableText('box\tcracked\r\n😀')).toBe(true);
    expect(isStorableText('a\u0000b')).toBe(false);
    expect(isStorableText('a\ud800b')).toBe(false);
    expect(isStorableText('a\udc00b')).toBe(false);
  });

  it('escapeUnstorable turns exactly those characters into their JSON escapes, nothing else', () => {
    expect(escapeUnstorable('plain text 😀')).toBe('plain text 😀');
    expect(escapeUnstorable('a\u0000b\ud800c\udfffd😀')).toBe('a\\u0000b\\ud800c\\udfffd😀');
    expect(isStorableText(escapeUnstorable('\u0000\ud800'))).toBe(true);
  });

  it('an escaped NUL inside a JSON string parses back to itself; one outside a string is malformed JSON', () => {
    const inString = escapeUnstorable('{"reason":"x\u0000"}');
    expect(JSON.parse(inString)).toEqual({ reason: 'x\u0000' });
    expect(() => JSON.parse(escapeUnstorable('{"a":1}\u0000'))).toThrow();
  });

  it('API text with a NUL or a lone surrogate is a validation error, with a reason', () => {
    for (const text of ['refund\u0000 please', 'refund \ud800']) {
      const r = TicketRequestSchema.safeParse({ ticketId: 'T-x', text });
      expect(r.success).toBe(false);
      expect(r.error?.issues[0]?.message).toMatch(/NUL characters or unpaired surrogates/);
    }
    expect(TicketRequestSchema.safeParse({ ticketId: 'T-x', text: 'refund\tplease 😀' }).success).toBe(true);
  });
});
