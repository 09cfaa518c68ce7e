import { describe, expect, it } from 'vitest';
import { createInstrumentations, INSTRUMENTATION_NAMES, instrumentedModules, selectedInstrumentations } from '../src/index.ts';

// Which auto-instrumentations a service runs, from OpenTelemetry's standard selection variables
// (docs/decisions/0410-choosing-instrumentations-and-measuring-steady-state.md).

describe('selectedInstrumentations', () => {
  it("runs every instrumentation by default, as OpenTelemetry's Node auto-instrumentation does", () => {
    expect(selectedInstrumentations({})).toEqual(['undici', 'runtime-node', 'http', 'express', 'pg', 'ioredis']);
    expect(instrumentedModules({})).toEqual(['http', 'https', 'node:http', 'node:https', 'express', 'pg', 'pg-pool', 'ioredis']);
    expect(createInstrumentations({})).toHaveLength(6);
  });

  it('OTEL_NODE_ENABLED_INSTRUMENTATIONS names the set', () => {
    const env = { OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http, pg,ioredis' };
    expect(selectedInstrumentations(env)).toEqual(['http', 'pg', 'ioredis']);
    expect(instrumentedModules(env)).toEqual(['http', 'https', 'node:http', 'node:https', 'pg', 'pg-pool', 'ioredis']);
    expect(createInstrumentations(env).map((i) => i.instrumentationName)).toEqual([
      '@opentelemetry/instrumentation-http',
      '@opentelemetry/instrumentation-pg',
      '@opentelemetry/instrumentation-ioredis',
    ]);
  });

  it('OTEL_NODE_DISABLED_INSTRUMENTATIONS takes names out of the set', () => {
    const env = {
      OTEL_NODE_ENABLED_INSTRUMENTATIONS: INSTRUMENTATION_NAMES.join(','),
      OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'runtime-node,ioredis',
    };
    expect(selectedInstrumentations(env)).toEqual(['undici', 'http', 'express', 'pg']);
    expect(selectedInstrumentations({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'express' })).toEqual([
      'undici',
      'runtime-node',
      'http',
      'pg',
      'ioredis',
    ]);
  });

  it('names that only loader-free instrumentations run register no loader hook', () => {
    expect(instrumentedModules({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'undici,runtime-node' })).toEqual([]);
  });

  it('refuses an unknown name, naming the known ones', () => {
    expect(() => selectedInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http,postgres' })).toThrow(
      /OTEL_NODE_ENABLED_INSTRUMENTATIONS: unknown instrumentation postgres; known: undici, runtime-node, http, express, pg, ioredis/,
    );
    expect(() => selectedInstrumentations({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'redis' })).toThrow(/unknown instrumentation redis/);
  });

  it('the fetch-tracing test switch takes undici out, and is refused outside tests', () => {
    const on = { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_FETCH_TRACING: '1' };
    expect(selectedInstrumentations(on)).not.toContain('undici');
    expect(() => selectedInstrumentations({ GATEHOUSE_TEST_DISABLE_FETCH_TRACING: '1' })).toThrow();
  });
});
