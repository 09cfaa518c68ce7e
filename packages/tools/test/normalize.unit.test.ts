import { describe, expect, it } from 'vitest';
import { canonicalOrderId, MAX_AMOUNT_CENTS, NormalizationError, noteOrNull, toCents } from '../src/index.ts';

describe('toCents', () => {
  it.each<[string | number]>([['30.00'], [30], [30.0], ['30'], ['30.0'], [' 30.00 '], ['30.000'], ['30.0000000']])(
    '%j is 3000 cents',
    (v) => {
      expect(toCents(v)).toBe(3000);
    },
  );

  it.each<[string | number, number]>([
    ['0.01', 1],
    ['0.1', 10],
    [0.1, 10],
    [120, 12000],
    ['49.00', 4900],
    ['-5', -500],
    // Zeros past the second decimal change nothing, as in a JSON number (ADR 0784).
    ['30.100', 3010],
    ['0.010', 1],
    ['-0.500', -50],
    // The largest amount (MAX_AMOUNT_CENTS, ADR 0689), as text and as a number, and its negative.
    ['21474836.47', 2_147_483_647],
    [21474836.47, 2_147_483_647],
    ['-21474836.47', -2_147_483_647],
  ])('%j is %i cents', (v, cents) => {
    expect(toCents(v)).toBe(cents);
  });

  it.each<[string | number]>([
    ['30.001'],
    [30.001],
    ['30.0001'],
    ['30.0010'],
    ['-0.000'],
    ['1e3'],
    [1e21],
    [1e-7],
    [Number.NaN],
    [Number.POSITIVE_INFINITY],
    [Number.NEGATIVE_INFINITY],
    [-0],
    ['-0.00'],
    ['-0'],
    ['abc'],
    [''],
    ['   '],
    ['+5'],
    ['30.'],
    ['.5'],
    ['1,000'],
    ['0x10'],
    ['1234567890'],
    ['30.00 USD'],
  ])('%j is a NormalizationError', (v) => {
    let thrown: unknown;
    try {
      toCents(v);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(NormalizationError);
    expect((thrown as NormalizationError).field).toBe('amount');
  });

  it.each<[string | number, RegExp]>([
    ['21474836.48', /amount must be at most 21474836\.47/],
    [21474836.48, /amount must be at most 21474836\.47/],
    ['999999999.99', /amount must be at most 21474836\.47/],
    ['-21474836.48', /amount must be at least -21474836\.47/],
  ])('%j is above the largest amount the system holds: a NormalizationError naming it', (v, message) => {
    expect(() => toCents(v)).toThrowError(
      expect.objectContaining({ name: 'NormalizationError', field: 'amount', message: expect.stringMatching(message) }),
    );
    expect(MAX_AMOUNT_CENTS).toBe(2 ** 31 - 1);
  });

  it('names the field it was given', () => {
    expect(() => toCents('x', 'total')).toThrowError(expect.objectContaining({ field: 'total', name: 'NormalizationError' }));
  });
});

describe('canonicalOrderId', () => {
  it('upper-cases and trims', () => {
    expect(canonicalOrderId('o-1002')).toBe('O-1002');
    expect(canonicalOrderId('  O-1002 ')).toBe('O-1002');
  });

  it.each([['O1002'], ['O-100'], ['O-10022'], [''], ['OO-1002'], ['O-1002; DROP']])('%j is rejected', (v) => {
    expect(() => canonicalOrderId(v)).toThrow(NormalizationError);
  });
});

describe('noteOrNull (ADR 0778)', () => {
  it('one note written in two forms is one note: a plan scheduled with its note re-spaced is the prepared plan (C4)', () => {
    expect(noteOrNull('  after  the\u00a0backup,\nplease ')).toBe('after the backup, please');
    expect(noteOrNull('after the backup, please')).toBe('after the backup, please');
  });

  it('blank, format characters only, or null: null', () => {
    expect([noteOrNull(' \n\t'), noteOrNull('\u200b'), noteOrNull(null)]).toEqual([null, null, null]);
  });

  it('longer than 240 characters once normalized: refused', () => {
    expect(() => noteOrNull('\ufdfa'.repeat(20))).toThrow(NormalizationError);
  });
});
