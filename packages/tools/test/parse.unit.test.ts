import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { z } from 'zod';
import {
  allTools,
  digestOf,
  parseProposal,
  strictModeViolations,
  supportTools,
  toFunctionTool,
  type ToolDefinition,
} from '../src/index.ts';

type Result = ReturnType<typeof parseProposal>;

/** Every failure is bounded: 1–5 issues of at most 200 characters. */
function expectBoundedFailure(r: Result, error?: string): void {
  expect(r.ok).toBe(false);
  if (r.ok) return;
  if (error) expect(r.error).toBe(error);
  expect(r.issues.length).toBeGreaterThanOrEqual(1);
  expect(r.issues.length).toBeLessThanOrEqual(5);
  for (const i of r.issues) expect(i.length).toBeLessThanOrEqual(200);
}

const refund = (o: Record<string, unknown>) => JSON.stringify({ orderId: 'O-1002', amount: '120.00', reason: 'cracked item', ...o });

describe('parseProposal rejects before any adapter call', () => {
  it.each<[string, string, string, string]>([
    ['unknown tool', 'drop_tables', '{"orderId":"O-1002"}', 'unknown_tool'],
    ['two concatenated objects', 'lookup_order', '{"orderId":"O-1"}{"orderId":"O-2"}', 'malformed_arguments'],
    ['truncated JSON', 'issue_refund', '{"orderId":"O-1002","amount":"12', 'malformed_arguments'],
    ['empty arguments', 'lookup_order', '', 'malformed_arguments'],
    ['a JSON string', 'lookup_order', '"42"', 'malformed_arguments'],
    ['a JSON number', 'lookup_order', '42', 'malformed_arguments'],
    ['an array', 'lookup_order', '[]', 'malformed_arguments'],
    ['null', 'lookup_order', 'null', 'malformed_arguments'],
    // Two members with one name: JSON.parse kept the last; a reader of the raw call sees the first (ADR 0687).
    [
      'an amount named twice',
      'issue_refund',
      '{"orderId":"O-1002","amount":"10.00","reason":"x","amount":"900.00"}',
      'malformed_arguments',
    ],
    ['an order id named twice, once escaped', 'lookup_order', '{"orderId":"O-1002","order\\u0049d":"O-1003"}', 'malformed_arguments'],
    ['extra field approved_by', 'issue_refund', refund({ approved_by: 'lead-eli' }), 'invalid_arguments'],
    ['a tenant field', 'lookup_order', '{"orderId":"O-1002","tenant":"northwind"}', 'invalid_arguments'],
    ['wrong type (amount boolean)', 'issue_refund', refund({ amount: true }), 'invalid_arguments'],
    ['wrong type (orderId number)', 'lookup_order', '{"orderId":1002}', 'invalid_arguments'],
    ['missing field', 'issue_refund', '{"orderId":"O-1002","amount":"1.00"}', 'invalid_arguments'],
    ['__proto__ key', 'lookup_order', '{"orderId":"O-1002","__proto__":{"approved":true}}', 'invalid_arguments'],
    ['constructor key', 'lookup_order', '{"orderId":"O-1002","constructor":{"prototype":1}}', 'invalid_arguments'],
    ['reason over 240 chars', 'issue_refund', refund({ reason: 'x'.repeat(241) }), 'invalid_arguments'],
    ['three-decimal amount', 'issue_refund', refund({ amount: '30.001' }), 'invalid_arguments'],
    ['exponent amount', 'issue_refund', refund({ amount: '1e3' }), 'invalid_arguments'],
    // JSON numbers whose written form the parse would lose (helper-51: 3e1 and 49.999999999999999 were paid as 30.00 and 50.00)
    ['exponent amount as a JSON number', 'issue_refund', '{"orderId":"O-1002","amount":3e1,"reason":"x"}', 'invalid_arguments'],
    ['a capital exponent', 'issue_refund', '{"orderId":"O-1002","amount":30E0,"reason":"x"}', 'invalid_arguments'],
    [
      'more digits than a double keeps',
      'issue_refund',
      '{"orderId":"O-1002","amount":49.999999999999999,"reason":"x"}',
      'invalid_arguments',
    ],
    ['three decimals as a JSON number', 'issue_refund', '{"orderId":"O-1002","amount":30.001,"reason":"x"}', 'invalid_arguments'],
    ['malformed order id', 'lookup_order', '{"orderId":"order 1002"}', 'invalid_arguments'],
    ['enum outside the template list', 'notify_customer', '{"orderId":"O-1002","template":"free_text"}', 'invalid_arguments'],
    // Valid JSON the ledger cannot store (jsonb refuses U+0000) or a person should not be shown.
    ['a NUL escape in the reason', 'issue_refund', '{"orderId":"O-1001","amount":"10.00","reason":"cracked\\u0000"}', 'invalid_arguments'],
    ['an ESC sequence in the reason', 'issue_refund', refund({ reason: 'ok\u001b[2J' }), 'invalid_arguments'],
    ['an unpaired surrogate', 'issue_refund', '{"orderId":"O-1001","amount":"10.00","reason":"x\\ud800"}', 'invalid_arguments'],
    ['a NUL in a key', 'lookup_order', '{"orderId":"O-1002","a\\u0000":1}', 'invalid_arguments'],
  ])('%s', (_name, tool, raw, error) => {
    expectBoundedFailure(parseProposal(tool, raw), error);
  });

  it('bounds issues for huge payloads (many unknown keys, long names)', () => {
    const many = Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`k${i}_${'z'.repeat(300)}`, i]));
    expectBoundedFailure(parseProposal('issue_refund', JSON.stringify({ ...many, orderId: 7, amount: [], reason: {} })));
    expectBoundedFailure(parseProposal('x'.repeat(5000), '{}'), 'unknown_tool');
  });

  it('tabs and line breaks in a reason are text, not control: accepted', () => {
    expect(parseProposal('issue_refund', refund({ reason: 'box\tcracked\r\nlid missing' })).ok).toBe(true);
  });

  it('JSON numbers written as plain decimals keep their value: 30, 30.0, 1.10, 4900', () => {
    const cents = (raw: string) => {
      const r = parseProposal('issue_refund', `{"orderId":"O-1002","amount":${raw},"reason":"x"}`);
      return r.ok ? r.args.amountCents : r.issues;
    };
    expect([cents('30'), cents('30.0'), cents('30.00'), cents('1.10'), cents('4900')]).toEqual([3000, 3000, 3000, 110, 490000]);
  });

  it('one reason written in two forms is one argument (ADR 0778): spacing, line breaks, Unicode forms', () => {
    const reason = (text: string) => {
      const r = parseProposal('issue_refund', refund({ reason: text }));
      return r.ok ? r.args.reason : r.issues;
    };
    const forms = ['lid cracked, café', 'lid  cracked,\tcafe\u0301', ' lid\u00a0cracked,\r\ncafé ', 'lid cracked,\u2003ｃａｆé'];
    expect(forms.map(reason)).toEqual(forms.map(() => 'lid cracked, café'));
  });

  it('a reason longer than 240 chars once its compatibility forms are unfolded is refused, bounded', () => {
    // U+FDFA is one character that NFKC unfolds into 18.
    expectBoundedFailure(parseProposal('issue_refund', refund({ reason: '\ufdfa'.repeat(20) })), 'invalid_arguments');
  });

  it('a reason of exactly 240 chars is accepted', () => {
    expect(parseProposal('issue_refund', refund({ reason: 'x'.repeat(240) })).ok).toBe(true);
  });
});

describe('parseProposal refuses secrets in arguments (docs/decisions/0580-secrets-in-tool-arguments.md)', () => {
  const JWT = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyZXAtYW5hIn0.c2lnbmF0dXJlX2J5dGVz';
  const SECRETS = ['CANARY_SECRET_q7', 'sk-test-4f9aK2mQ8zX1', 'Bearer xyz0123456789abcdef', JWT];

  it.each(SECRETS)('a refund reason carrying %s: invalid_arguments naming the reason, the secret not echoed', (secret) => {
    const r = parseProposal('issue_refund', refund({ reason: `damaged; also ${secret}` }));
    expectBoundedFailure(r, 'invalid_arguments');
    if (r.ok) return;
    expect(r.issues).toHaveLength(1);
    expect(r.issues[0]).toMatch(/^reason: text may not contain a secret/);
    expect(JSON.stringify(r)).not.toContain(secret);
    expect(JSON.stringify(r)).not.toContain('[redacted]');
  });

  it('a reason whose one form (ADR 0778) is a secret shape, a key header split by a tab or a line break: refused', () => {
    for (const reason of ['-----BEGIN RSA\tPRIVATE KEY-----', 'see -----BEGIN\nPRIVATE KEY-----']) {
      const r = parseProposal('issue_refund', refund({ reason }));
      expectBoundedFailure(r, 'invalid_arguments');
      if (!r.ok) expect(r.issues[0]).toMatch(/^reason: text may not contain a secret/);
    }
  });

  it('every tool and field: a change note, an order id, an unknown key and a nested value', () => {
    const cases: Array<[string, string, string]> = [
      ['prepare_change', '{"changeId":"CHG-101","window":"manual-window","note":"ok CANARY_SECRET_n"}', 'note'],
      ['lookup_order', '{"orderId":"sk-test-abcdef12"}', 'orderId'],
      ['issue_refund', refund({ CANARY_SECRET_k: 1 }), '(root)'],
      ['issue_refund', refund({ extra: { deeper: ['x', 'CANARY_SECRET_d'] } }), 'extra.deeper.1'],
    ];
    for (const [tool, raw, path] of cases) {
      const r = parseProposal(tool, raw);
      expectBoundedFailure(r, 'invalid_arguments');
      if (!r.ok) expect(r.issues[0]).toMatch(new RegExp(`^${path.replace(/[().]/g, '\\$&')}: text may not contain a secret`));
      expect(JSON.stringify(r)).not.toMatch(/CANARY_SECRET_|sk-test/);
    }
  });

  it('a reason without a secret shape is accepted, hyphenated English included', () => {
    for (const reason of ['damaged in transit', 'task-related: the desk-organizer arrived cracked', 'bearer of receipt']) {
      expect(parseProposal('issue_refund', refund({ reason })).ok).toBe(true);
    }
  });
});

describe('parseProposal normalizes valid proposals', () => {
  it('o-1002 / "120.00" → O-1002 and 12000 cents', () => {
    const r = parseProposal('issue_refund', JSON.stringify({ orderId: 'o-1002', amount: '120.00', reason: ' cracked item ' }));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.tool.name).toBe('issue_refund');
    expect(r.args).toEqual({ orderId: 'O-1002', amountCents: 12000, reason: 'cracked item' });
    expect(r.target).toBe('O-1002');
  });

  it('"30.00", 30 and 30.0 give the same normalized action digest', () => {
    const digests = ['"30.00"', '30', '30.0', '"30"'].map((a) => {
      const r = parseProposal('issue_refund', `{"orderId":"O-1001","amount":${a},"reason":"dup"}`);
      if (!r.ok) throw new Error(r.issues.join());
      return digestOf({ tool: r.tool.name, args: r.args });
    });
    expect(new Set(digests).size).toBe(1);
  });
});

const REFUND_KEYS = ['amount', 'orderId', 'reason'];

/** Independent oracle: what an accepted issue_refund input must look like. */
function checkAccepted(raw: string, r: Extract<Result, { ok: true }>): void {
  const v = JSON.parse(raw) as Record<string, unknown>;
  expect(typeof v === 'object' && v !== null && !Array.isArray(v)).toBe(true);
  expect(Object.keys(v).sort()).toEqual(REFUND_KEYS);
  expect(typeof v.orderId).toBe('string');
  expect(['string', 'number']).toContain(typeof v.amount);
  expect(typeof v.reason).toBe('string');
  expect((v.reason as string).length).toBeLessThanOrEqual(240);
  expect(r.args.orderId).toBe((v.orderId as string).trim().toUpperCase());
  expect(r.args.orderId).toMatch(/^[A-Z]-\d{4}$/);
  const cents = r.args.amountCents as number;
  expect(Number.isSafeInteger(cents)).toBe(true);
  expect(cents).toBe(Math.round(Number(String(v.amount).trim()) * 100));
  // One form of the text (ADR 0778): compatibility forms folded, format characters dropped, white space one space.
  const oneForm = (v.reason as string)
    .normalize('NFKC')
    .replace(/\p{Cf}/gu, '')
    .split(/\s+/u)
    .filter(Boolean)
    .join(' ');
  expect(r.args.reason).toBe(oneForm);
}

const orderIdArb = fc.oneof(
  fc
    .tuple(fc.constantFrom('O', 'o', 'N', 'n', 'x'), fc.integer({ min: 0, max: 9999 }))
    .map(([l, n]) => `${l}-${String(n).padStart(4, '0')}`),
  fc.string(),
  fc.integer(),
);
const amountArb = fc.oneof(
  fc.integer({ min: -100_000, max: 100_000 }).map((c) => (c / 100).toFixed(2)),
  fc.integer({ min: 1, max: 100_000 }).map((c) => c / 100),
  fc.double(),
  fc.string(),
  fc.constantFrom('1e3', '-0.00', '30.001', '', ' 5 ', null, true),
);
const refundLike = fc
  .record(
    { orderId: orderIdArb, amount: amountArb, reason: fc.string({ maxLength: 260 }), approved_by: fc.string(), tenant: fc.string() },
    { requiredKeys: [] },
  )
  .map((o) => JSON.stringify(o));
// Mostly the three contract fields, sometimes with a smuggled extra field.
const refundCore = fc
  .tuple(
    fc.record({ orderId: orderIdArb, amount: amountArb, reason: fc.string({ maxLength: 260 }) }),
    fc.option(fc.record({ approved_by: fc.string(), tenant: fc.string() }, { requiredKeys: [] }), { freq: 3 }),
  )
  .map(([core, extra]) => JSON.stringify({ ...core, ...extra }));
/** Hostile shapes: prototype-pollution keys, glued objects, huge and unicode strings. */
const hostile = fc.oneof(
  fc.constantFrom(
    '{"__proto__":{"approved":true},"orderId":"O-1002","amount":"1.00","reason":"x"}',
    '{"constructor":{"prototype":{"ok":true}},"orderId":"O-1002","amount":1,"reason":"x"}',
    '{"orderId":"O-1"}{"orderId":"O-2"}',
    '{"orderId":"O-1002","amount":"1.00","reason":"x"',
    '"42"',
    '[]',
  ),
  fc.string({ unit: 'grapheme', maxLength: 200 }).map((r) => JSON.stringify({ orderId: 'O-1002', amount: '1.00', reason: r })),
  fc.integer({ min: 10_000, max: 200_000 }).map((n) => JSON.stringify({ orderId: 'O-1002', amount: '1.00', reason: 'x'.repeat(n) })),
  fc.string({ unit: 'grapheme' }),
);
const rawArb = fc.oneof(
  fc.string(),
  fc.json(),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  refundLike,
  refundCore,
  refundCore,
  hostile,
);

describe('parseProposal property (fast-check)', () => {
  it('never throws and returns ok only for a valid issue_refund object (10,000 runs)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(rawArb, (raw) => {
        const r = parseProposal('issue_refund', raw);
        if (r.ok) {
          accepted++;
          checkAccepted(raw, r);
        } else expectBoundedFailure(r);
      }),
      { numRuns: 10_000 },
    );
    // the generator reaches the accepting path, so the oracle is exercised
    expect(accepted).toBeGreaterThan(0);
  });

  it('accepts every well-formed refund (both amount forms)', () => {
    const valid = fc.record({
      orderId: fc.tuple(fc.constantFrom('O', 'o'), fc.integer({ min: 0, max: 9999 })).map(([l, n]) => `${l}-${String(n).padStart(4, '0')}`),
      cents: fc.integer({ min: 1, max: 50_000 }),
      asNumber: fc.boolean(),
      reason: fc.string({ maxLength: 240 }),
    });
    fc.assert(
      fc.property(valid, ({ orderId, cents, asNumber, reason }) => {
        const raw = JSON.stringify({ orderId, amount: asNumber ? cents / 100 : (cents / 100).toFixed(2), reason });
        const r = parseProposal('issue_refund', raw);
        expect(r.ok).toBe(true);
        if (r.ok) expect(r.args.amountCents).toBe(cents);
      }),
      { numRuns: 500 },
    );
  });

  it('unknown or random tool names never throw', () => {
    const names = fc.oneof(
      fc.constantFrom(...allTools.map((t) => t.name)),
      fc.string(),
      fc.constantFrom('__proto__', 'constructor', 'toString'),
    );
    fc.assert(
      fc.property(names, rawArb, (name, raw) => {
        const r = parseProposal(name, raw);
        if (r.ok) expect(allTools.map((t) => t.name)).toContain(name);
        else expectBoundedFailure(r);
      }),
      { numRuns: 500 },
    );
  });
});

describe('digestOf and strict schemas', () => {
  it('digestOf is stable across key order and changes with any value', () => {
    const a = { tool: 'issue_refund', args: { orderId: 'O-1002', amountCents: 12000, reason: 'x' }, version: 1 };
    const b = { version: 1, args: { reason: 'x', amountCents: 12000, orderId: 'O-1002' }, tool: 'issue_refund' };
    expect(digestOf(a)).toBe(digestOf(b));
    expect(digestOf(a)).toMatch(/^[0-9a-f]{64}$/);
    expect(digestOf({ ...a, args: { ...a.args, amountCents: 12001 } })).not.toBe(digestOf(a));
  });

  it('every tool of both packs is strict-mode valid', () => {
    expect(allTools.map((t) => t.name)).toHaveLength(7);
    for (const t of allTools) expect(strictModeViolations(toFunctionTool(t).parameters)).toEqual([]);
  });

  it('a schema with an optional property is reported (and refused at boot)', () => {
    const args = z.strictObject({ orderId: z.string(), note: z.string().optional() });
    const schema = z.toJSONSchema(args, { target: 'draft-2020-12' });
    expect(strictModeViolations(schema)).toContain('$.note: every property must be required');
    const base = supportTools[0] as ToolDefinition;
    expect(() => toFunctionTool({ ...base, name: 'bad_tool', args })).toThrow(/bad_tool is not strict-mode valid/);
  });

  it('a non-strict object and an unsupported keyword are reported', () => {
    expect(strictModeViolations({ type: 'object', properties: {}, required: [] })).toContain('$: additionalProperties must be false');
    expect(strictModeViolations({ type: 'object', properties: {}, additionalProperties: false, oneOf: [] })).toContain(
      '$: unsupported keyword oneOf',
    );
  });
});

describe('change pack contracts (docs/product/users-and-tools.md#change-pack)', () => {
  it('lookup and prepare canonicalize the change id; a blank note is null; null stays null', () => {
    const l = parseProposal('lookup_change', '{"changeId":" chg-101 "}');
    expect(l.ok && l.args).toEqual({ changeId: 'CHG-101' });
    const p = parseProposal('prepare_change', '{"changeId":"CHG-101","window":"next-maintenance-window","note":"  "}');
    expect(p.ok && p.args).toEqual({ changeId: 'CHG-101', window: 'next-maintenance-window', note: null });
    const q = parseProposal('prepare_change', '{"changeId":"CHG-101","window":"manual-window","note":null}');
    expect(q.ok && q.target).toBe('CHG-101');
  });

  it('closed: missing note, unknown window, a bad plan id, a long note, an extra tenant field are validation failures', () => {
    for (const [name, raw] of [
      ['prepare_change', '{"changeId":"CHG-101","window":"next-maintenance-window"}'],
      ['prepare_change', '{"changeId":"CHG-101","window":"tonight","note":null}'],
      ['prepare_change', '{"changeId":"rm -rf /","window":"manual-window","note":null}'],
      ['schedule_change', '{"planId":"plan_ABC","window":"manual-window","note":null}'],
      ['schedule_change', `{"planId":"plan_0123456789abcdef","window":"manual-window","note":"${'x'.repeat(241)}"}`],
      ['schedule_change', '{"planId":"plan_0123456789abcdef","window":"manual-window","note":null,"tenant":"northwind"}'],
    ] as const) {
      const r = parseProposal(name, raw);
      expect(r.ok, raw).toBe(false);
    }
    const ok = parseProposal('schedule_change', '{"planId":"plan_0123456789abcdef","window":"manual-window","note":null}');
    expect(ok.ok && ok.args).toEqual({ planId: 'plan_0123456789abcdef', window: 'manual-window', note: null });
  });
});
