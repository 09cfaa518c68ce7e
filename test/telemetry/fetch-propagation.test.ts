import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { INSTRUMENTATION_METRICS, TELEMETRY_PRELOAD } from '../../packages/telemetry/src/index.ts';

// docs/decisions/0260-telemetry-everywhere.md: one refund's execution, run in a process started
// as every service is (the telemetry preload), with the executor's worker and adapters and the
// staging systems of record over real HTTP; spans go to an in-memory exporter. The adapter's
// fetch is a CLIENT span whose W3C traceparent reaches staging, whose SERVER span is its child;
// the job is a CONSUMER span of the PRODUCER span that sent it (messaging conventions).

const FIXTURE = fileURLToPath(new URL('./fixtures/traced-refund.ts', import.meta.url));
const SERVER = 1;
const CLIENT = 2;
const PRODUCER = 3;
const CONSUMER = 4;

interface Span {
  name: string;
  kind: number;
  scope: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: Record<string, unknown>;
}
interface Run {
  outcome: string;
  spans: Span[];
  received: Array<{ url: string; traceparent: string | null }>;
  results: Array<{ queue: string; job_id: string; payload: { traceparent?: string } }>;
  metrics: Array<{ name: string; unit: string; type: number; monotonic?: boolean }>;
}

async function runRefund(env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, ['--import', TELEMETRY_PRELOAD, FIXTURE], {
    cwd: repoRoot,
    // An endpoint turns the preload on; the fixture passes its own in-memory processor and reader.
    env: { ...process.env, GATEHOUSE_ENV: 'test', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((r) => child.once('exit', r));
  expect(code, err).toBe(0);
  return JSON.parse(out.trim().split('\n').at(-1)!) as Run;
}

const refundPost = (s: Span): boolean => String(s.attributes['url.full'] ?? '').includes('/ledger/refunds');

describe('trace context over fetch to the systems of record', () => {
  let run: Run;

  it('the executor CLIENT span carries traceparent to staging, whose SERVER span is its child in the same trace', async () => {
    run = await runRefund();
    expect(run.outcome).toBe('succeeded');
    const consumer = run.spans.find((s) => s.name === 'executions process')!;
    const client = run.spans.find((s) => s.kind === CLIENT && s.scope.includes('undici') && refundPost(s));
    expect(client, 'no undici CLIENT span for POST /ledger/refunds').toBeDefined();
    expect(client!.traceId).toBe(consumer.traceId);
    const server = run.spans.find((s) => s.kind === SERVER && s.name === 'POST /ledger/refunds');
    expect(server, 'no staging SERVER span').toBeDefined();
    expect(server!.traceId).toBe(client!.traceId);
    expect(server!.parentSpanId).toBe(client!.spanId);
    // The header itself reached staging, naming the client span.
    const at = run.received.find((r) => r.url === '/ledger/refunds');
    expect(at?.traceparent).toBe(`00-${client!.traceId}-${client!.spanId}-01`);
    // The order read of the re-evaluation too.
    expect(run.spans.some((s) => s.kind === CLIENT && String(s.attributes['url.full']).includes('/orders/'))).toBe(true);
    // No ticket content in the client spans: method, URL of the system of record, status.
    expect(JSON.stringify(client!.attributes)).not.toMatch(/amount|reason/i);
  });

  it('job spans are CONSUMER spans of the PRODUCER span that sent the job, in the messaging conventions', () => {
    const consumer = run.spans.find((s) => s.name === 'executions process')!;
    expect(consumer.kind).toBe(CONSUMER);
    expect(consumer.attributes).toMatchObject({
      'messaging.system': 'bullmq',
      'messaging.destination.name': 'executions.rel-1',
      'messaging.operation.type': 'process',
    });
    expect(String(consumer.attributes['messaging.message.id'])).toMatch(/^exec_/);
    const send = run.spans.find((s) => s.spanId === consumer.parentSpanId)!;
    expect(send).toMatchObject({ name: 'send executions.rel-1', kind: PRODUCER });
    expect(send.attributes).toMatchObject({
      'messaging.system': 'bullmq',
      'messaging.destination.name': 'executions.rel-1',
      'messaging.operation.type': 'send',
      'messaging.message.id': consumer.attributes['messaging.message.id'],
    });
    // The results job the execution wrote through the outbox: its PRODUCER span is a child of the
    // job's span, and the context stored with the job is that span's.
    const results = run.spans.find((s) => s.kind === PRODUCER && s.name === 'send results.rel-1')!;
    expect(results.parentSpanId).toBe(consumer.spanId);
    expect(results.attributes['messaging.message.id']).toBe(run.results[0]!.job_id);
    expect(run.results[0]!.payload.traceparent).toBe(`00-${results.traceId}-${results.spanId}-01`);
  });

  it('the instrumentations export the metrics the registry lists (name, kind, unit)', () => {
    const kindOf = (m: Run['metrics'][number]): string =>
      m.type === 0 ? 'histogram' : m.type === 2 ? 'gauge' : m.monotonic ? 'counter' : 'updowncounter';
    const seen = new Map(run.metrics.map((m) => [m.name, { kind: kindOf(m), unit: m.unit }]));
    for (const def of INSTRUMENTATION_METRICS) expect(seen.get(def.name), def.name).toEqual({ kind: def.kind, unit: def.unit });
  });

  it('control removed: without the fetch instrumentation no CLIENT span, no traceparent at staging, staging starts its own trace', async () => {
    const off = await runRefund({ GATEHOUSE_TEST_DISABLE_FETCH_TRACING: '1' });
    expect(off.outcome).toBe('succeeded');
    const consumer = off.spans.find((s) => s.name === 'executions process')!;
    expect(off.spans.filter((s) => s.kind === CLIENT && s.scope.includes('undici'))).toEqual([]);
    expect(off.received.find((r) => r.url === '/ledger/refunds')?.traceparent).toBeNull();
    const server = off.spans.find((s) => s.kind === SERVER && s.name === 'POST /ledger/refunds')!;
    expect(server.traceId).not.toBe(consumer.traceId);
  });

  it('OTEL_NODE_DISABLED_INSTRUMENTATIONS leaves the named instrumentations out of the process, the rest still trace', async () => {
    const scopes = (r: Run): Set<string> => new Set(r.spans.map((s) => s.scope));
    expect([...scopes(run)]).toEqual(
      expect.arrayContaining(['@opentelemetry/instrumentation-pg', '@opentelemetry/instrumentation-undici']),
    );
    const without = await runRefund({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'pg,ioredis' });
    expect(without.outcome).toBe('succeeded');
    expect([...scopes(without)].filter((s) => /instrumentation-(pg|ioredis)$/.test(s))).toEqual([]);
    expect(without.spans.find((s) => s.kind === CLIENT && refundPost(s))).toBeDefined();
    expect(without.spans.find((s) => s.name === 'executions process')).toBeDefined();
  });
});
