import { describe, expect, it } from 'vitest';
import type { WorklistItem } from '@gatehouse/reconciliation';
import { formatItem, formatOutcome } from '../src/reconcile-commands.ts';

// A held remediation is printed from the outcome's typed field (ADR 0692, 0701), not by parsing
// `tool_disabled:<tool>` back out of its reason: the reason stays what the audit and API carry.
describe('formatOutcome of a retry', () => {
  it('held by containment: names the tool of waitingFor and what releases it', () => {
    const line = formatOutcome({
      state: 'retry',
      itemId: 'i-1',
      reason: 'tool_disabled:issue_refund',
      waitingFor: { on: 'containment', tool: 'issue_refund' },
    });
    expect(line).toBe(
      'item i-1: held — issue_refund is switched off (containment); nothing was sent and its approval is unused. It runs at the next reconcile once `gatehouse switch on issue_refund` or a re-enable stage admits its tenant',
    );
  });

  it('a reason that only looks like a hold is not one: the typed field decides', () => {
    const line = formatOutcome({
      state: 'retry',
      itemId: 'i-2',
      reason: 'tool_disabled:issue_refund',
      waitingFor: { on: 'system_of_record' },
    });
    expect(line).toBe('item i-2: retry (tool_disabled:issue_refund)');
  });
});

// A worklist line names the remediations its class allows, as `reconcile resolve` flags, until one
// is under way: before, on-call learned them only from the refusal of a wrong flag.
describe('formatItem', () => {
  const item = (over: Partial<WorklistItem>): WorklistItem =>
    ({
      id: 'i-3',
      status: 'open',
      class: 'in_flight_ledger_lacks_it',
      owner: 'payments-lead',
      subject: 'op:k-1',
      amount_cents: '3000',
      tool: 'issue_refund',
      remediation: null,
      approval_id: null,
      ...over,
    }) as WorklistItem;

  it('names the allowed remediations as flags while none is under way', () => {
    expect(formatItem(item({}))).toMatch(/op:k-1 {2}30\.00 {2}fixes=--replay\|--ratify$/);
    expect(formatItem(item({ class: 'amount_mismatch' }))).toMatch(/fixes=--reverse\|--ratify$/);
  });

  it('names the remediation under way instead', () => {
    expect(formatItem(item({ remediation: 'replay', approval_id: 'a-1' }))).toMatch(/remediation=replay approval=a-1$/);
  });
});

describe('formatOutcome of a busy remediation', () => {
  it('says when the lease it waits for ends, and that a run after then takes over', () => {
    const leaseUntil = new Date('2026-12-07T09:00:00.000Z');
    expect(formatOutcome({ state: 'busy', itemId: 'i-4', leaseUntil })).toBe(
      'item i-4: another process is executing its remediation (its lease ends at 2026-12-07T09:00:00.000Z: if that process died, run this command again after then and it takes over)',
    );
    expect(formatOutcome({ state: 'busy', itemId: 'i-5' })).toBe('item i-5: another process is executing its remediation');
  });
});
