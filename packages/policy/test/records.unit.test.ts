import { describe, expect, it } from 'vitest';
import { changeRecord, MalformedRecord, orderRecord } from '../src/records.ts';

// What a system of record answers is validated and reduced to the fields the rules read; its text
// is untrusted: redacted and bounded like a tool output, since approvers see it and the action's
// facts store it (docs/product/invariants.md#untrusted-output).

const ORDER = { id: 'O-1004', tenant: 'quillfeather', region: 'US', customer: 'cust-4', paid: 45000, status: 'shipped' };

describe('order and change records from the systems of record', () => {
  it('a well-formed order keeps its figures; fields the rules do not read are dropped', () => {
    expect(orderRecord(ORDER)).toEqual({ id: 'O-1004', tenant: 'quillfeather', region: 'US', paid: 45000, status: 'shipped' });
  });

  it('a status carrying a secret and 20 KB is redacted and cut, marked', () => {
    const status = orderRecord({ ...ORDER, status: `shipped; print sk-test-CANARYq1w2e3r4 ${'A'.repeat(20_000)}` }).status;
    expect(status).not.toContain('CANARY');
    expect(status.startsWith('shipped; print [redacted] A')).toBe(true);
    expect(status.endsWith('…[truncated]')).toBe(true);
    expect(status.length).toBeLessThanOrEqual(1012);
  });

  it('an order paid exactly the largest amount (2^31 - 1 cents) is read as it is', () => {
    expect(orderRecord({ ...ORDER, paid: 2 ** 31 - 1 }).paid).toBe(2_147_483_647);
  });

  it('identifiers arrive exact or refuse the record: never redacted or cut', () => {
    // An id that looks like a key is compared as it is (a redacted tenant would deny by mistake).
    expect(orderRecord({ ...ORDER, tenant: 'sk-live-9fQ2xLr8Tz4W' }).tenant).toBe('sk-live-9fQ2xLr8Tz4W');
    expect(() => orderRecord({ ...ORDER, tenant: 'quill\u0000feather' })).toThrow(/tenant: has a control character/);
    expect(() => orderRecord({ ...ORDER, region: 'U'.repeat(129) })).toThrow(/region: /);
    expect(() => orderRecord({ ...ORDER, id: '' })).toThrow(/id: /);
  });

  it.each([
    ['paid as a string', { ...ORDER, paid: '450.00' }, /order system answered a malformed record: paid: /],
    ['paid in fractions of a cent', { ...ORDER, paid: 450.5 }, /paid: /],
    ['a negative amount paid', { ...ORDER, paid: -1 }, /paid: /],
    // Above the largest amount the system holds (ADR 0689): a reship's approval of it could not be recorded.
    ['paid above the largest amount, 2^31 cents', { ...ORDER, paid: 2 ** 31 }, /paid: .*2147483647/],
    ['no tenant', { ...ORDER, tenant: undefined }, /tenant: /],
    ['an array', [ORDER], /\(root\): /],
    ['null', null, /\(root\): /],
  ])('%s is refused with the field named', (_what, body, reason) => {
    expect(() => orderRecord(body)).toThrow(reason);
    expect(() => orderRecord(body)).toThrow(MalformedRecord);
  });

  it('a change record is reduced and bounded the same way; a malformed one is refused', () => {
    const change = {
      id: 'CHG-1',
      tenant: 'quillfeather',
      environment: 'prod',
      service: `api ${'x'.repeat(5000)}`,
      risk: 'low',
      summary: 'free text',
    };
    const read = changeRecord(change);
    expect(Object.keys(read).sort()).toEqual(['environment', 'id', 'risk', 'service', 'tenant']);
    expect(read.service.endsWith('…[truncated]')).toBe(true);
    expect(() => changeRecord({ ...change, risk: 3 })).toThrow(/change service answered a malformed record: risk: /);
  });
});
