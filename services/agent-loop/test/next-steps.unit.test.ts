import { describe, expect, it } from 'vitest';
import { AS_A_NEW_TICKET, STOP_REASONS } from '@gatehouse/contracts';
import { outageNextStep } from '@gatehouse/ledger';
import { NEXT_STEP } from '../src/domain/workflow-state.ts';
import { callIdRefusedStep, callIdReusedStep } from '../src/jobs/turn-calls.ts';

// A ticket id maps to one workflow: a rep told to "resubmit the ticket" who sends it again gets the
// same stopped run back, and with other text a 409 ticket_conflict — a next step that leads nowhere.
// Every next step that says "resubmit" says it is a new ticket with a new ticketId (ADR 0782).

describe('a next step that says resubmit names a new ticketId', () => {
  it.each(STOP_REASONS.filter((r) => /resubmit/i.test(NEXT_STEP[r])))('stop reason %s', (reason) => {
    expect(NEXT_STEP[reason]).toContain(AS_A_NEW_TICKET);
  });

  it('the outage ceiling’s next step', () => {
    expect(outageNextStep('model', 900_000)).toContain(AS_A_NEW_TICKET);
  });

  it('the refused and reused call_id steps', () => {
    expect(callIdRefusedStep('too long')).toContain(AS_A_NEW_TICKET);
    expect(callIdReusedStep([{ call_id: 'call_0' }, { call_id: 'call_0' }])).toContain(AS_A_NEW_TICKET);
  });

  it('the phrase names the new ticketId and why', () => {
    expect(AS_A_NEW_TICKET).toMatch(/new ticketId/);
    expect(AS_A_NEW_TICKET).toMatch(/gives back this run/);
  });
});
