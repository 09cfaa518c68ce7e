import { describe, expect, it } from 'vitest';
import { classify, ownerOf, remediationsOf, type AgentOperation, type Finding, type Snapshot } from '../src/index.ts';

// The classifier is a pure function of one snapshot (docs/product/reconciliation.md): these cases pin each class and
// the rules that are easy to get wrong — the cumulative basis of the over-limit class, a live
// lease left alone, baselines for shipments, and reversals.

const NOW = Date.parse('2026-11-30T12:00:00Z');
let seq = 0;

function op(over: Partial<AgentOperation> & Pick<AgentOperation, 'key'>): AgentOperation {
  seq++;
  return {
    tool: 'issue_refund',
    status: 'succeeded',
    workflowId: `00000000-0000-4000-8000-${String(seq).padStart(12, '0')}`,
    tenant: 'quillfeather',
    actionId: `10000000-0000-4000-8000-${String(seq).padStart(12, '0')}`,
    actionStatus: 'succeeded',
    callId: `call_${seq}`,
    target: 'O-1001',
    args: { orderId: 'O-1001', amountCents: 2000, reason: 'damaged' },
    fencingToken: '1',
    leaseExpiresAtMs: null,
    baselineShipments: null,
    dispatchedAtMs: null,
    evidenceRef: null,
    frozen: false,
    createdAtMs: NOW - 60_000 + seq,
    usedApproval: false,
    ...over,
  };
}

function snapshot(over: Partial<Snapshot>): Snapshot {
  return {
    operations: [],
    refunds: [],
    reversals: [],
    shipments: new Map(),
    messages: new Map(),
    recordTenants: new Map(),
    changeOperations: [],
    orders: new Map([
      ['O-1001', { tenant: 'quillfeather', region: 'US', paidCents: 12000 }],
      ['O-1002', { tenant: 'quillfeather', region: 'US', paidCents: 50000 }],
    ]),
    autoApproveLimitCents: 5000,
    nowMs: NOW,
    ...over,
  };
}

const refund = (key: string, amountCents: number, orderId = 'O-1001', atMs = NOW - 30_000, refundId = `re_${key}`) => ({
  refundId,
  orderId,
  amountCents,
  idempotencyKey: key,
  createdAtMs: atMs,
});

const brief = (fs: Finding[]) => fs.map((f) => `${f.class} ${f.subject}`).sort();

describe('classify: refunds joined by idempotency key', () => {
  it('finds each refund class once and never trusts the agent status alone', () => {
    const ops = [
      op({ key: 'k-match' }),
      op({ key: 'k-missing' }),
      op({ key: 'k-amount', args: { orderId: 'O-1001', amountCents: 2500 } }),
      op({ key: 'k-has', status: 'failed_unknown', args: { orderId: 'O-1002', amountCents: 1500 }, target: 'O-1002' }),
      op({ key: 'k-lacks', status: 'running', leaseExpiresAtMs: NOW - 1 }),
      op({ key: 'k-live', status: 'running', leaseExpiresAtMs: NOW + 10_000 }),
      op({ key: 'k-failed-but-there', status: 'failed', args: { orderId: 'O-1001', amountCents: 700 } }),
    ];
    const refunds = [
      refund('k-match', 2000, 'O-1001', NOW - 50_000),
      refund('k-amount', 2600, 'O-1002', NOW - 49_000),
      refund('k-has', 1500, 'O-1002', NOW - 48_000),
      refund('k-failed-but-there', 700, 'O-1001', NOW - 47_000),
      refund('manual-1', 900, 'O-1001', NOW - 46_000),
    ];
    const found = classify(snapshot({ operations: ops, refunds }));
    expect(brief(found)).toEqual(
      [
        'matched op:k-match',
        'agent_done_ledger_missing op:k-missing',
        'amount_mismatch op:k-amount',
        'in_flight_ledger_has_it op:k-has',
        'in_flight_ledger_lacks_it op:k-lacks',
        'ledger_entry_without_step refund:re_k-failed-but-there',
        'ledger_entry_without_step refund:re_manual-1',
      ].sort(),
    );
    const has = found.find((f) => f.class === 'in_flight_ledger_has_it')!;
    expect(has.resume).toEqual({ evidenceRef: 're_k-has', data: { refundId: 're_k-has', orderId: 'O-1002', amountCents: 1500 } });
    expect(found.find((f) => f.class === 'amount_mismatch')!.detail).toEqual({ agentAmountCents: 2500, ledgerAmountCents: 2600 });
  });

  it('a compensated step matches its reversed refund; a reversal nobody recorded leaves the step without its effect', () => {
    const ops = [op({ key: 'k-comp', actionStatus: 'compensated' }), op({ key: 'k-rev' })];
    const refunds = [refund('k-comp', 2000), refund('k-rev', 2000)];
    const reversals = [
      { reversalId: 'rv_1', refundId: 're_k-comp', idempotencyKey: 'recon_1', createdAtMs: NOW },
      { reversalId: 'rv_2', refundId: 're_k-rev', idempotencyKey: 'other', createdAtMs: NOW },
    ];
    expect(brief(classify(snapshot({ operations: ops, refunds, reversals })))).toEqual([
      'agent_done_ledger_missing op:k-rev',
      'matched op:k-comp',
    ]);
  });
});

describe('classify: refunds over the auto limit without a used approval', () => {
  it('selects by the cumulative basis on the order and the approval, not by time', () => {
    const ops = [
      op({ key: 'a', target: 'O-1002', args: { orderId: 'O-1002', amountCents: 4900 } }),
      op({ key: 'b', target: 'O-1002', args: { orderId: 'O-1002', amountCents: 4900 } }),
      op({ key: 'c', target: 'O-1002', args: { orderId: 'O-1002', amountCents: 4900 }, usedApproval: true }),
      op({ key: 'd', args: { orderId: 'O-1001', amountCents: 6000 } }),
      op({ key: 'e', args: { orderId: 'O-1001', amountCents: 100 } }),
    ];
    // Refund d was long ago (a time window would miss it); e is small but its order is already above the limit.
    const refunds = [
      refund('d', 6000, 'O-1001', NOW - 90 * 86_400_000),
      refund('e', 100, 'O-1001', NOW - 1000),
      refund('a', 4900, 'O-1002', NOW - 3000),
      refund('b', 4900, 'O-1002', NOW - 2000),
      refund('c', 4900, 'O-1002', NOW - 1000),
    ];
    const over = classify(snapshot({ operations: ops, refunds })).filter((f) => f.class === 'refund_over_limit_without_approval');
    expect(over.map((f) => [f.subject, f.detail.cumulativeCents])).toEqual([
      ['refund:re_d', 6000],
      ['refund:re_e', 6100],
      ['refund:re_b', 9800],
    ]);
    expect(over.every((f) => f.operationKey && f.workflowId)).toBe(true);
  });

  it('a refund reversed before the next one leaves the basis; a reversed refund is no longer selected', () => {
    const ops = [
      op({ key: 'x', args: { orderId: 'O-1001', amountCents: 6000 } }),
      op({ key: 'y', args: { orderId: 'O-1001', amountCents: 1000 } }),
    ];
    const refunds = [refund('x', 6000, 'O-1001', NOW - 3000), refund('y', 1000, 'O-1001', NOW - 1000)];
    const reversals = [{ reversalId: 'rv_x', refundId: 're_x', idempotencyKey: 'recon_x', createdAtMs: NOW - 2000 }];
    const found = classify(snapshot({ operations: ops, refunds, reversals }));
    expect(found.filter((f) => f.class === 'refund_over_limit_without_approval')).toEqual([]);
  });
});

describe('classify: shipments by count, mail by template, changes by key', () => {
  it('decides an in-flight reship by its baseline and flags a surplus shipment', () => {
    const ship = (id: string, cancelled = false) => ({ shipmentId: id, createdAtMs: NOW - 1000, cancelled });
    const ops = [
      op({
        key: 'r1',
        tool: 'reship_order',
        status: 'failed_unknown',
        target: 'O-1001',
        args: { orderId: 'O-1001' },
        baselineShipments: 0,
      }),
      op({
        key: 'r2',
        tool: 'reship_order',
        status: 'failed_unknown',
        target: 'O-1002',
        args: { orderId: 'O-1002' },
        baselineShipments: 1,
      }),
    ];
    const shipments = new Map([
      ['O-1001', [ship('s1')]],
      ['O-1002', [ship('s2')]],
      ['O-1003', [ship('s3'), ship('s4', true)]],
    ]);
    expect(brief(classify(snapshot({ operations: ops, shipments })))).toEqual([
      'in_flight_ledger_has_it op:r1',
      'in_flight_ledger_lacks_it op:r2',
      'shipment_count_mismatch order:O-1002:surplus+1',
      'shipment_count_mismatch order:O-1003:surplus+1',
    ]);
  });

  it('never takes a shipment older than the reship’s dispatch, or of unreadable time, as its effect (ADR 0678)', () => {
    const reship = (key: string, target: string) =>
      op({
        key,
        tool: 'reship_order',
        status: 'failed_unknown',
        target,
        args: { orderId: target },
        baselineShipments: 0,
        dispatchedAtMs: NOW - 500,
      });
    const ops = [reship('r-old', 'O-1001'), reship('r-nan', 'O-1002')];
    const shipments = new Map([
      ['O-1001', [{ shipmentId: 's-old', createdAtMs: NOW - 1000, cancelled: false }]],
      ['O-1002', [{ shipmentId: 's-nan', createdAtMs: NaN, cancelled: false }]],
    ]);
    expect(brief(classify(snapshot({ operations: ops, shipments })))).toEqual([
      'in_flight_ledger_lacks_it op:r-old',
      'shipment_count_mismatch order:O-1001:surplus+1',
      'shipment_count_mismatch order:O-1002:in_flight:r-nan',
    ]);
  });

  it('leaves an order alone while a reship holds a live lease', () => {
    const ops = [
      op({
        key: 'r',
        tool: 'reship_order',
        status: 'running',
        leaseExpiresAtMs: NOW + 5000,
        target: 'O-1001',
        args: { orderId: 'O-1001' },
      }),
    ];
    const shipments = new Map([['O-1001', [{ shipmentId: 's', createdAtMs: NOW, cancelled: false }]]]);
    expect(classify(snapshot({ operations: ops, shipments }))).toEqual([]);
  });

  it('joins change operations by key and lists an operation no step scheduled', () => {
    const change = (operationKey: string) => ({
      operationKey,
      changeId: 'CHG-101',
      tenant: 'quillfeather',
      planId: 'plan_aaaaaaaaaaaaaaaa',
      window: 'manual-window',
      status: 'scheduled',
    });
    const ops = [
      op({ key: 'c1', tool: 'schedule_change', target: 'plan_aaaaaaaaaaaaaaaa', args: {} }),
      op({ key: 'c2', tool: 'schedule_change', status: 'failed_unknown', target: 'plan_aaaaaaaaaaaaaaaa', args: {} }),
      op({ key: 'c3', tool: 'schedule_change', target: 'plan_aaaaaaaaaaaaaaaa', args: {} }),
    ];
    expect(brief(classify(snapshot({ operations: ops, changeOperations: [change('c1'), change('c2'), change('stray')] })))).toEqual([
      'agent_done_ledger_missing op:c3',
      'in_flight_ledger_has_it op:c2',
      'ledger_entry_without_step change:stray',
      'matched op:c1',
    ]);
  });

  it('decides an in-flight mail by the messages of its template beyond the sends that succeeded', () => {
    const ops = [
      op({ key: 'm1', tool: 'notify_customer', target: 'O-1001', args: { orderId: 'O-1001', template: 'apology' } }),
      op({
        key: 'm2',
        tool: 'notify_customer',
        status: 'failed_unknown',
        target: 'O-1001',
        args: { orderId: 'O-1001', template: 'apology' },
      }),
      op({
        key: 'm3',
        tool: 'notify_customer',
        status: 'failed_unknown',
        target: 'O-1001',
        args: { orderId: 'O-1001', template: 'refund_issued' },
      }),
    ];
    const messages = new Map([
      [
        'O-1001',
        [
          { messageId: 'msg_1', template: 'apology', createdAtMs: NOW - 3000 },
          { messageId: 'msg_2', template: 'apology', createdAtMs: NOW - 2000 },
        ],
      ],
    ]);
    expect(brief(classify(snapshot({ operations: ops, messages })))).toEqual([
      'in_flight_ledger_has_it op:m2',
      'in_flight_ledger_lacks_it op:m3',
    ]);
  });
});

describe('effects no step explains, found by time window (ADR 0791)', () => {
  const mail = (template: string, over: Partial<AgentOperation> & Pick<AgentOperation, 'key'>) =>
    op({ tool: 'notify_customer', target: 'W-1001', args: { orderId: 'W-1001', template }, ...over });
  const listed = (id: string, template: string, ago = 5000) => ({ messageId: id, template, createdAtMs: NOW - ago });

  it('lists a message no send names as ledger_entry_without_step for the support lead', () => {
    const ops = [mail('apology', { key: 'm1', evidenceRef: 'msg_a' })];
    const messages = new Map([['W-1001', [listed('msg_a', 'apology'), listed('msg_b', 'apology'), listed('msg_c', 'reship_created')]]]);
    const found = classify(snapshot({ operations: ops, messages, recordTenants: new Map([['W-1001', 'quillfeather']]) }));
    const orphans = found.filter((f) => f.class === 'ledger_entry_without_step');
    expect(orphans.map((f) => [f.subject, f.tool, f.orderId, f.tenant, f.ledgerRef])).toEqual([
      ['message:msg_b', 'notify_customer', 'W-1001', 'quillfeather', 'msg_b'],
      ['message:msg_c', 'notify_customer', 'W-1001', 'quillfeather', 'msg_c'],
    ]);
    expect(ownerOf('ledger_entry_without_step', 'notify_customer')).toBe('support-lead');
    expect(remediationsOf('ledger_entry_without_step', 'notify_customer')).toEqual(['adopt']);
  });

  it('lists nothing when every message is a send’s: named, taken by a send that names none, or claimed in flight', () => {
    const ops = [
      mail('apology', { key: 'm1', evidenceRef: 'msg_a' }),
      mail('apology', { key: 'm2' }), // succeeded, names no message: it sent the oldest unnamed one
      mail('apology', { key: 'm3', status: 'failed_unknown' }),
    ];
    const messages = new Map([
      ['W-1001', [listed('msg_old', 'apology', 9000), listed('msg_a', 'apology'), listed('msg_new', 'apology', 1000)]],
    ]);
    const found = classify(snapshot({ operations: ops, messages }));
    expect(found.filter((f) => f.class === 'ledger_entry_without_step')).toEqual([]);
    expect(found.find((f) => f.operationKey === 'm3')?.class).toBe('in_flight_ledger_has_it');
  });

  it('leaves an order whose send the executor owns, and a message sent after the snapshot began, to the next pass', () => {
    const messages = new Map([['W-1001', [listed('msg_a', 'apology')]]]);
    const live = [mail('apology', { key: 'm1', status: 'pending' })];
    expect(classify(snapshot({ operations: live, messages })).filter((f) => f.class === 'ledger_entry_without_step')).toEqual([]);
    const late = new Map([['W-1001', [listed('msg_late', 'apology', -10)]]]);
    expect(classify(snapshot({ messages: late })).filter((f) => f.class === 'ledger_entry_without_step')).toEqual([]);
  });

  it('names the tenant the window listing gave for a shipment of an order the world does not know', () => {
    const shipments = new Map([['X-1001', [{ shipmentId: 'shp_x', createdAtMs: NOW - 5000, cancelled: false }]]]);
    const [f] = classify(snapshot({ shipments, recordTenants: new Map([['X-1001', 'quillfeather']]) }));
    expect(f).toMatchObject({
      class: 'shipment_count_mismatch',
      subject: 'order:X-1001:surplus+1',
      tenant: 'quillfeather',
      ledgerRef: 'shp_x',
    });
  });
});

describe('compensations are never agent tools', () => {
  it('no remediation tool is in the catalog the model is offered', async () => {
    const { REMEDIATION_TOOL } = await import('../src/index.ts');
    const { allTools, findTool } = await import('@gatehouse/tools');
    for (const tool of Object.values(REMEDIATION_TOOL)) {
      expect(findTool(tool)).toBeUndefined();
      expect(allTools.map((t) => t.name)).not.toContain(tool);
    }
  });
});
