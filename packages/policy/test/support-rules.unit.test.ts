import { describe, expect, it } from 'vitest';
import { loadWorld } from '@gatehouse/contracts';
import { supportTools } from '@gatehouse/tools';
import {
  eligibleTools,
  evaluateSupport,
  loadSupportBundle,
  SupportBundleSchema,
  tenantDailyCapCents,
  type SupportBundle,
  type SupportFacts,
} from '../src/index.ts';

const world = loadWorld();
const bundle = loadSupportBundle('support-p1');
const L = bundle.limits;
const granted = world.agent.grantedTools;

function user(id: string): NonNullable<SupportFacts['user']> {
  const u = world.users.find((x) => x.id === id);
  if (!u) throw new Error(`no user ${id} in world`);
  return { id: u.id, tenant: u.tenant, region: u.region ?? null, scopes: u.scopes ?? [] };
}

function order(id: string): NonNullable<SupportFacts['order']> {
  const o = world.orders.find((x) => x.id === id);
  if (!o) throw new Error(`no order ${id} in world`);
  return { id: o.id, tenant: o.tenant, region: o.region, paid: o.paid, status: o.status };
}

function tool(name: string): SupportFacts['tool'] {
  const t = supportTools.find((x) => x.name === name);
  if (!t) throw new Error(`no tool ${name}`);
  return { name: t.name, scope: t.scope };
}

interface Case {
  userId?: string | null;
  orderId?: string | null;
  orderOverride?: Partial<NonNullable<SupportFacts['order']>>;
  toolName?: string;
  amountCents?: number;
  prior?: number;
  user24h?: number;
  agent1h?: number;
  tenant24h?: number;
  tenantCap?: number | null;
  mode?: 'investigate' | 'act';
  agentTools?: string[];
}

/** Facts the gateway would load, built from the world (nothing retyped). */
function facts(c: Case): SupportFacts {
  const toolName = c.toolName ?? 'issue_refund';
  const agentTools = c.agentTools ?? granted;
  const eligible = eligibleTools(supportTools, { mode: c.mode ?? 'act', state: 'investigating' }, agentTools).map((t) => t.name);
  const base = c.orderId === null ? null : order(c.orderId ?? 'O-1002');
  return {
    user: c.userId === null ? null : user(c.userId ?? 'rep-ana'),
    agentGrantedTools: agentTools,
    eligibleTools: eligible,
    tool: tool(toolName),
    args:
      toolName === 'issue_refund'
        ? { orderId: base?.id ?? 'O-9999', amountCents: c.amountCents ?? 1000, reason: 'damaged' }
        : { orderId: base?.id ?? 'O-9999' },
    order: base ? { ...base, ...c.orderOverride } : null,
    priorRefundsOnOrderCents: c.prior ?? 0,
    userRefunds24hCents: c.user24h ?? 0,
    agentRefunds1hCents: c.agent1h ?? 0,
    tenantRefunds24hCents: c.tenant24h ?? 0,
    tenantRefundCap24hCents: c.tenantCap ?? null,
  };
}

type Expect = [decision: 'ALLOW' | 'DENY' | 'REQUIRE_APPROVAL', ruleId: string];

const perRule: Array<[string, Case, Expect]> = [
  ['R0 unknown user', { userId: null }, ['DENY', 'R0']],
  ['R1 tool not granted to the agent', { agentTools: granted.filter((t) => t !== 'issue_refund') }, ['DENY', 'R1']],
  ['R1 write tool not eligible in investigate mode', { mode: 'investigate' }, ['DENY', 'R1']],
  ['R1 user without scope (rep-cy, issue_refund)', { userId: 'rep-cy', orderId: 'O-1001' }, ['DENY', 'R1']],
  ['R2 order of another tenant (N-2001 for rep-ana)', { orderId: 'N-2001' }, ['DENY', 'R2']],
  ['R2 order outside the user region (rep-eva EU, O-1001 US)', { userId: 'rep-eva', orderId: 'O-1001' }, ['DENY', 'R2']],
  ['R2 order not found', { orderId: null }, ['DENY', 'R2']],
  ['R3 amount zero', { amountCents: 0 }, ['DENY', 'R3']],
  ['R3 amount negative', { amountCents: -1 }, ['DENY', 'R3']],
  ['R4 prior + amount above paid', { orderId: 'O-1001', prior: order('O-1001').paid, amountCents: 1 }, ['DENY', 'R4']],
  ['R5 user 24h total above limit', { user24h: L.userRolling24hCents, amountCents: 1 }, ['DENY', 'R5']],
  ['R6 agent 1h total above limit', { agent1h: L.agentRolling1hCents, amountCents: 1 }, ['DENY', 'R6']],
  ['R7 above auto limit', { amountCents: L.autoApproveLimitCents + 1 }, ['REQUIRE_APPROVAL', 'R7']],
  ['R8 reship of an unshipped order (O-1005)', { toolName: 'reship_order', orderId: 'O-1005' }, ['DENY', 'R8']],
  ['R9 reship of an order paid above limit (O-1004)', { toolName: 'reship_order', orderId: 'O-1004' }, ['REQUIRE_APPROVAL', 'R9']],
  ['ALLOW small refund', { amountCents: 1 }, ['ALLOW', 'ALL']],
  ['ALLOW read in investigate mode', { toolName: 'lookup_order', mode: 'investigate' }, ['ALLOW', 'ALL']],
];

const o1001Paid = order('O-1001').paid;
const boundaries: Array<[string, Case, Expect]> = [
  // R3 maximum 50000 (O-1002 paid 50000, so R4 does not interfere)
  ['max: just below', { amountCents: L.maxRefundCents - 1 }, ['REQUIRE_APPROVAL', 'R7']],
  ['max: at', { amountCents: L.maxRefundCents }, ['REQUIRE_APPROVAL', 'R7']],
  ['max: just above', { amountCents: L.maxRefundCents + 1 }, ['DENY', 'R3']],
  // R7 auto limit 5000, single and cumulative
  ['auto: just below', { amountCents: L.autoApproveLimitCents - 1 }, ['ALLOW', 'ALL']],
  ['auto: at', { amountCents: L.autoApproveLimitCents }, ['ALLOW', 'ALL']],
  ['auto: just above', { amountCents: L.autoApproveLimitCents + 1 }, ['REQUIRE_APPROVAL', 'R7']],
  ['auto cumulative: at', { prior: 100, amountCents: L.autoApproveLimitCents - 100 }, ['ALLOW', 'ALL']],
  ['auto cumulative: just above', { prior: 100, amountCents: L.autoApproveLimitCents - 99 }, ['REQUIRE_APPROVAL', 'R7']],
  // R4 amount paid (O-1001)
  ['paid: just below', { orderId: 'O-1001', amountCents: o1001Paid - 1 }, ['REQUIRE_APPROVAL', 'R7']],
  ['paid: at', { orderId: 'O-1001', amountCents: o1001Paid }, ['REQUIRE_APPROVAL', 'R7']],
  ['paid: just above', { orderId: 'O-1001', amountCents: o1001Paid + 1 }, ['DENY', 'R4']],
  ['paid cumulative: at', { orderId: 'O-1001', prior: o1001Paid - 1000, amountCents: 1000 }, ['REQUIRE_APPROVAL', 'R7']],
  ['paid cumulative: just above', { orderId: 'O-1001', prior: o1001Paid - 1000, amountCents: 1001 }, ['DENY', 'R4']],
  // R5 user 24h 100000
  ['24h: just below', { user24h: L.userRolling24hCents - 1001, amountCents: 1000 }, ['ALLOW', 'ALL']],
  ['24h: at', { user24h: L.userRolling24hCents - 1000, amountCents: 1000 }, ['ALLOW', 'ALL']],
  ['24h: just above', { user24h: L.userRolling24hCents - 999, amountCents: 1000 }, ['DENY', 'R5']],
  // R6 agent 1h 300000
  ['1h: just below', { agent1h: L.agentRolling1hCents - 1001, amountCents: 1000 }, ['ALLOW', 'ALL']],
  ['1h: at', { agent1h: L.agentRolling1hCents - 1000, amountCents: 1000 }, ['ALLOW', 'ALL']],
  ['1h: just above', { agent1h: L.agentRolling1hCents - 999, amountCents: 1000 }, ['DENY', 'R6']],
  // R9 reship paid 30000 (O-1008 is paid exactly 30000; neighbours derived from it)
  [
    'reship paid: just below',
    { toolName: 'reship_order', orderId: 'O-1008', orderOverride: { paid: L.reshipApprovalPaidAboveCents - 1 } },
    ['ALLOW', 'ALL'],
  ],
  ['reship paid: at (O-1008)', { toolName: 'reship_order', orderId: 'O-1008' }, ['ALLOW', 'ALL']],
  [
    'reship paid: just above',
    { toolName: 'reship_order', orderId: 'O-1008', orderOverride: { paid: L.reshipApprovalPaidAboveCents + 1 } },
    ['REQUIRE_APPROVAL', 'R9'],
  ],
];

describe('evaluateSupport (support-p1)', () => {
  it('the world fixtures the table relies on hold', () => {
    expect(order('O-1008').paid).toBe(L.reshipApprovalPaidAboveCents);
    expect(order('O-1002').paid).toBeGreaterThanOrEqual(L.maxRefundCents);
    expect(order('O-1005').status).not.toBe('shipped');
    expect(order('O-1004').paid).toBeGreaterThan(L.reshipApprovalPaidAboveCents);
  });

  it('covers every rule id of the bundle', () => {
    const covered = new Set(perRule.map(([, , [, r]]) => r));
    for (const id of bundle.ruleOrder) expect(covered.has(id)).toBe(true);
    expect(covered.has('ALL')).toBe(true);
  });

  it.each(perRule)('%s', (_name, c, [decision, ruleId]) => {
    const d = evaluateSupport(facts(c), bundle);
    expect({ decision: d.decision, ruleId: d.ruleId, policyRevision: d.policyRevision }).toEqual({
      decision,
      ruleId,
      policyRevision: 'support-p1',
    });
    expect(d.reason.length).toBeGreaterThan(0);
  });

  it.each(boundaries)('boundary %s', (_name, c, [decision, ruleId]) => {
    const d = evaluateSupport(facts(c), bundle);
    expect({ decision: d.decision, ruleId: d.ruleId, policyRevision: d.policyRevision }).toEqual({
      decision,
      ruleId,
      policyRevision: 'support-p1',
    });
  });
});

/** Four refunds of 4900 on O-1002, each seeing the previous ones as prior refunds on the order. */
function fourRefunds(b: SupportBundle) {
  const out: Array<{ prior: number; decision: string; ruleId: string; policyRevision: string }> = [];
  let prior = 0;
  for (let i = 0; i < 4; i++) {
    const d = evaluateSupport(facts({ orderId: 'O-1002', amountCents: 4900, prior, user24h: prior, agent1h: prior }), b);
    out.push({ prior, decision: d.decision, ruleId: d.ruleId, policyRevision: d.policyRevision });
    prior += 4900;
  }
  return out;
}

describe('cumulative auto limit (four refunds of 4900 on one order)', () => {
  it('first is ALLOW, the second on (prior 4900, 9800, 14700) REQUIRE_APPROVAL R7', () => {
    expect(fourRefunds(bundle)).toEqual([
      { prior: 0, decision: 'ALLOW', ruleId: 'ALL', policyRevision: 'support-p1' },
      { prior: 4900, decision: 'REQUIRE_APPROVAL', ruleId: 'R7', policyRevision: 'support-p1' },
      { prior: 9800, decision: 'REQUIRE_APPROVAL', ruleId: 'R7', policyRevision: 'support-p1' },
      { prior: 14700, decision: 'REQUIRE_APPROVAL', ruleId: 'R7', policyRevision: 'support-p1' },
    ]);
  });

  it('control removed: without R7 in ruleOrder all four are ALLOW (R7 is load-bearing)', () => {
    const withoutR7: SupportBundle = { ...bundle, ruleOrder: bundle.ruleOrder.filter((r) => r !== 'R7') };
    expect(withoutR7.ruleOrder).toHaveLength(bundle.ruleOrder.length - 1);
    expect(fourRefunds(withoutR7).map((r) => r.decision)).toEqual(['ALLOW', 'ALLOW', 'ALLOW', 'ALLOW']);
    // the original bundle object is untouched
    expect(bundle.ruleOrder).toContain('R7');
  });
});

describe('R10 tenant daily refund cap (support-p2)', () => {
  const p2 = loadSupportBundle('support-p2');
  const cap = p2.limits.tenantRolling24hCents!;
  const decide = (c: Case, b: SupportBundle = p2) => {
    const d = evaluateSupport(facts(c), b);
    return `${d.decision}:${d.ruleId}`;
  };

  it('the bundle default applies at, just below and just above the cap; support-p1 has no such rule', () => {
    expect(decide({ tenant24h: cap - 1001, amountCents: 1000 })).toBe('ALLOW:ALL');
    expect(decide({ tenant24h: cap - 1000, amountCents: 1000 })).toBe('ALLOW:ALL');
    expect(decide({ tenant24h: cap - 999, amountCents: 1000 })).toBe('DENY:R10');
    expect(decide({ tenant24h: cap * 10, amountCents: 1000 }, bundle)).toBe('ALLOW:ALL');
    expect(bundle.ruleOrder).not.toContain('R10');
  });

  it("a tenant's own cap in the directory tightens the default, never loosens it", () => {
    expect(tenantDailyCapCents({ tenantRefundCap24hCents: 1000 }, p2)).toBe(1000);
    expect(tenantDailyCapCents({ tenantRefundCap24hCents: cap + 1 }, p2)).toBe(cap);
    expect(tenantDailyCapCents({ tenantRefundCap24hCents: null }, p2)).toBe(cap);
    expect(tenantDailyCapCents({ tenantRefundCap24hCents: 1000 }, bundle)).toBeUndefined();
    expect(decide({ tenant24h: 0, tenantCap: 999, amountCents: 1000 })).toBe('DENY:R10');
    expect(decide({ tenant24h: cap - 1000, tenantCap: cap * 2, amountCents: 1001 })).toBe('DENY:R10');
  });

  it('R10 decides before R7 and after R5 and R6', () => {
    expect(decide({ tenant24h: cap, amountCents: L.autoApproveLimitCents + 1 })).toBe('DENY:R10');
    expect(decide({ tenant24h: cap, user24h: L.userRolling24hCents, amountCents: 1 })).toBe('DENY:R5');
    expect(decide({ tenant24h: cap, agent1h: L.agentRolling1hCents, amountCents: 1 })).toBe('DENY:R6');
    expect(p2.ruleOrder.indexOf('R10')).toBe(p2.ruleOrder.indexOf('R6') + 1);
  });

  it('control removed: without R10 in ruleOrder a refund over the tenant cap is allowed', () => {
    const withoutR10: SupportBundle = { ...p2, ruleOrder: p2.ruleOrder.filter((r) => r !== 'R10') };
    expect(decide({ tenant24h: cap, amountCents: 1000 }, withoutR10)).toBe('ALLOW:ALL');
  });

  it('a bundle naming R10 without its cap, or a cap without R10, does not load', () => {
    expect(() => SupportBundleSchema.parse({ ...p2, limits: { ...p2.limits, tenantRolling24hCents: undefined } })).toThrow(/R10/);
    expect(() => SupportBundleSchema.parse({ ...bundle, limits: { ...bundle.limits, tenantRolling24hCents: 1 } })).toThrow(/R10/);
    expect(() => SupportBundleSchema.parse({ ...p2, ruleOrder: [...p2.ruleOrder, 'R10'] })).toThrow(/twice/);
    expect(() => SupportBundleSchema.parse({ ...p2, ruleOrder: p2.ruleOrder.filter((r) => r !== 'R4') })).toThrow(/R4 is missing/);
  });
});

describe('eligibleTools', () => {
  it('investigate mode offers only lookup_order', () => {
    const tools = eligibleTools(supportTools, { mode: 'investigate', state: 'investigating' }, granted);
    expect(tools.map((t) => t.name)).toEqual(['lookup_order']);
  });

  it('act mode offers every granted support tool; terminal states offer nothing', () => {
    expect(eligibleTools(supportTools, { mode: 'act', state: 'investigating' }, granted).map((t) => t.name)).toEqual(
      supportTools.filter((t) => granted.includes(t.name)).map((t) => t.name),
    );
    expect(eligibleTools(supportTools, { mode: 'act', state: 'completed' }, granted)).toEqual([]);
  });

  it('a tool not granted to the agent is never eligible', () => {
    const tools = eligibleTools(supportTools, { mode: 'act', state: 'executing' }, ['lookup_order']);
    expect(tools.map((t) => t.name)).toEqual(['lookup_order']);
  });
});
