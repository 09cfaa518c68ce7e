import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { startTelemetry, withSpan, type Telemetry } from '@gatehouse/telemetry';
import { createLogger } from '../src/logger.ts';

// Logs (docs/product/design.md#observability): pino JSON carrying the trace and span ids of the active span, with redaction
// paths for credentials and content.

const spans = new InMemorySpanExporter();
let telemetry: Telemetry;
beforeAll(() => {
  telemetry = startTelemetry('logger-test', 'rel-t', { spanProcessors: [new SimpleSpanProcessor({ exporter: spans })], metricReaders: [] });
});
afterAll(async () => {
  await telemetry.shutdown();
});

function capture(): { lines: () => Array<Record<string, unknown>>; log: ReturnType<typeof createLogger> } {
  let buf = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      buf += chunk.toString();
      done();
    },
  });
  return {
    log: createLogger('svc', sink),
    lines: () =>
      buf
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

describe('service logs', () => {
  it('a line logged inside a span carries its trace_id and span_id; outside a span, none', async () => {
    const { log, lines } = capture();
    log.info('outside');
    let ids: { traceId: string; spanId: string } | undefined;
    await withSpan('work', {}, async (span) => {
      ids = span.spanContext();
      log.info({ jobId: 'j1' }, 'inside');
    });
    const [outside, inside] = lines();
    expect(outside).not.toHaveProperty('trace_id');
    expect(inside).toMatchObject({ service: 'svc', msg: 'inside', trace_id: ids!.traceId, span_id: ids!.spanId, trace_flags: '01' });
    expect(spans.getFinishedSpans().map((s) => s.spanContext().traceId)).toContain(inside!.trace_id);
  });

  it('credentials and content are redacted wherever the usual keys appear', () => {
    const { log, lines } = capture();
    const SECRET = 'sk-test-CANARYlog42';
    log.warn(
      {
        authorization: `Bearer ${SECRET}`,
        req: { headers: { authorization: `Bearer ${SECRET}`, cookie: SECRET, 'x-api-key': SECRET } },
        err: { message: 'request failed', config: { headers: { Authorization: `Bearer ${SECRET}` } } },
        token: SECRET,
        body: { text: `please refund, my key is ${SECRET}`, password: SECRET, apiKey: SECRET },
        call: { arguments: `{"note":"${SECRET}"}`, output: SECRET },
        model: { input: SECRET, prompt: SECRET, instructions: SECRET },
        secret: SECRET,
        delegation: SECRET,
        workflowId: 'wf-1',
      },
      'redaction',
    );
    const raw = JSON.stringify(lines());
    expect(raw).not.toContain('CANARY');
    expect(lines()[0]).toMatchObject({ workflowId: 'wf-1', token: '[redacted]', req: { headers: { authorization: '[redacted]' } } });
  });
});
