import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { inTransaction, recordAudit } from '@gatehouse/ledger';
import { createLogger } from '@gatehouse/platform';
import { METRICS, MetricsProbe, observeAuditBacklog, startTelemetry, type Telemetry } from '@gatehouse/telemetry';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { chainPending, readAuditBacklog } from '../src/jobs/chain.writer.ts';
import { evaluateMonitors, raiseAlerts } from '../src/domain/monitors.ts';

// Metrics (docs/product/design.md#observability) are counted where the audit service chains committed events: a step whose
// transaction rolled back never counts, a retried step counts once, and monitor alerts raise a
// metric as well as a log line.

let t: TestDatabase;
let telemetry: Telemetry;
const probe = new MetricsProbe();
const rev = { policy: 'support-p1', release: 'rel-1' };

beforeAll(async () => {
  t = await createTestDatabase();
  telemetry = startTelemetry('audit', 'rel-1', { spanProcessors: [], metricReaders: [probe] });
});
afterAll(async () => {
  await telemetry?.shutdown();
  await t?.drop();
});

async function drain(): Promise<void> {
  while ((await chainPending(t.db)) > 0);
}

describe('metrics from the chain writer', () => {
  it('count committed audit events once; a rolled-back step counts nothing', async () => {
    await inTransaction(t.db, async (trx) => {
      await recordAudit(trx, { type: 'proposal.received', service: 'agent-loop', runId: 'r1', tool: 'issue_refund', revisions: rev });
      await recordAudit(trx, {
        type: 'policy.decision',
        service: 'policy-gateway',
        runId: 'r1',
        tool: 'issue_refund',
        ruleId: 'R2',
        decision: 'DENY',
        revisions: rev,
      });
    });
    // A step that fails after writing its audit event: the event and the metric never exist.
    await expect(
      inTransaction(t.db, async (trx) => {
        await recordAudit(trx, { type: 'approval.requested', service: 'approval', runId: 'r1', tool: 'issue_refund', revisions: rev });
        throw new Error('step failed');
      }),
    ).rejects.toThrow('step failed');
    await inTransaction(t.db, async (trx) => {
      await recordAudit(trx, {
        type: 'operation.unknown',
        service: 'executor',
        runId: 'r1',
        tool: 'issue_refund',
        outcome: 'timeout',
        latencyMs: 15000,
        revisions: rev,
      });
      await recordAudit(trx, { type: 'run.stopped', service: 'agent-loop', runId: 'r1', outcome: 'budget_exhausted', revisions: rev });
    });
    expect((await readAuditBacklog(t.db)).events).toBe(4);
    await drain();
    await drain(); // nothing left: nothing counted twice

    expect(await probe.total(METRICS.proposals.name, { tool: 'issue_refund', release: 'rel-1', service: 'agent-loop' })).toBe(1);
    expect(await probe.total(METRICS.denials.name, { tool: 'issue_refund', rule: 'R2', policy_revision: 'support-p1' })).toBe(1);
    expect(await probe.total(METRICS.approvals.name)).toBe(0);
    expect(await probe.total(METRICS.failedUnknown.name, { tool: 'issue_refund' })).toBe(1);
    expect(await probe.total(METRICS.budgetStops.name)).toBe(1);
    expect(await probe.total(METRICS.auditLag.name)).toBe(4);
    expect(await readAuditBacklog(t.db)).toEqual({ events: 0, oldestAgeMs: 0 });
  });

  it('the backlog gauges read the unchained events and the age of the oldest at each collection', async () => {
    observeAuditBacklog(() => readAuditBacklog(t.db)); // as the service's main.ts registers it
    await inTransaction(t.db, (trx) => recordAudit(trx, { type: 'run.started', service: 'agent-loop', runId: 'r2' }));
    await sql`update audit_outbox set created_at = now() - interval '7 seconds'`.execute(t.db);
    let points = await probe.read();
    expect(points.get(METRICS.auditBacklog.name)?.[0]?.value).toBe(1);
    expect(Number(points.get(METRICS.auditBacklogAge.name)?.[0]?.value)).toBeGreaterThanOrEqual(7000);
    await drain();
    points = await probe.read();
    expect(points.get(METRICS.auditBacklog.name)?.[0]?.value).toBe(0);
    expect(points.get(METRICS.auditBacklogAge.name)?.[0]?.value).toBe(0);
  });

  it('a monitor alert raises gatehouse.monitor.alerts{monitor} with its log line', async () => {
    const bad = await createAction(t.db, { orderId: 'O-1006', amountCents: 9900, decision: 'ALLOW', approved: false });
    await recordEffect(t.db, bad);
    let logged = '';
    const sink = new Writable({
      write(chunk: Buffer, _e, done) {
        logged += chunk.toString();
        done();
      },
    });
    const alerts = await evaluateMonitors(t.db, { autoApproveLimitCents: 5000, maxFailedUnknownPerHour: 3 });
    await raiseAlerts(alerts, createLogger('audit', sink));
    expect(logged).toContain('refund_over_auto_limit_without_approval');
    expect(await probe.total(METRICS.alerts.name, { monitor: 'refund_over_auto_limit_without_approval' })).toBe(1);
  });
});
