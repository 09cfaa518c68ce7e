import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Instrumentation } from '@opentelemetry/instrumentation';
import { createInstrumentations, INSTRUMENTATION_NAMES, instrumentedModules, selectedInstrumentations } from '../src/index.ts';

// Which auto-instrumentations a service runs, from OpenTelemetry's standard selection variables
// (docs/decisions/0410-choosing-instrumentations-and-measuring-steady-state.md).

describe('selectedInstrumentations', () => {
  // createInstrumentations enables what it makes (constructors patch modules): disable them again.
  const made: Instrumentation[] = [];
  const create = (env: Record<string, string>): Instrumentation[] => {
    const list = createInstrumentations(selectedInstrumentations(env));
    made.push(...list);
    return list;
  };
  afterEach(() => {
    for (const i of made.splice(0)) i.disable();
    vi.restoreAllMocks();
  });

  it("runs every instrumentation by default, as OpenTelemetry's Node auto-instrumentation does", () => {
    expect(selectedInstrumentations({})).toEqual(['undici', 'runtime-node', 'http', 'express', 'pg', 'ioredis']);
    expect(instrumentedModules(selectedInstrumentations({}))).toEqual([
      'http',
      'https',
      'node:http',
      'node:https',
      'express',
      'pg',
      'pg-pool',
      'ioredis',
    ]);
    expect(create({})).toHaveLength(6);
  });

  it('OTEL_NODE_ENABLED_INSTRUMENTATIONS names the set', () => {
    const env = { OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http, pg,ioredis' };
    expect(selectedInstrumentations(env)).toEqual(['http', 'pg', 'ioredis']);
    expect(instrumentedModules(selectedInstrumentations(env))).toEqual([
      'http',
      'https',
      'node:http',
      'node:https',
      'pg',
      'pg-pool',
      'ioredis',
    ]);
    expect(create(env).map((i) => i.instrumentationName)).toEqual([
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
    expect(instrumentedModules(selectedInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'undici,runtime-node' }))).toEqual([]);
  });

  it('ignores names it does not run, with a warning, as OpenTelemetry does', () => {
    const warn = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    expect(selectedInstrumentations({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'fs,dns,pg' })).toEqual([
      'undici',
      'runtime-node',
      'http',
      'express',
      'ioredis',
    ]);
    expect(selectedInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http,postgres' })).toEqual(['http']);
    expect(warn.mock.calls.map((c) => String(c[0]))).toEqual([
      expect.stringMatching(/OTEL_NODE_DISABLED_INSTRUMENTATIONS names fs, dns, not run by Gatehouse \(ignored\)/),
      expect.stringMatching(
        /OTEL_NODE_ENABLED_INSTRUMENTATIONS names postgres, not run by Gatehouse \(ignored\); known: undici, runtime-node, http, express, pg, ioredis/,
      ),
    ]);
  });

  it('an empty value is not given; a value of blanks enables none', () => {
    expect(selectedInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: '' })).toEqual(INSTRUMENTATION_NAMES);
    expect(selectedInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: ' , ' })).toEqual([]);
    expect(selectedInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http,,pg' })).toEqual(['http', 'pg']);
  });

  it('the fetch-tracing test switch takes undici out, and is refused outside tests', () => {
    const on = { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_FETCH_TRACING: '1' };
    expect(selectedInstrumentations(on)).not.toContain('undici');
    expect(() => selectedInstrumentations({ GATEHOUSE_TEST_DISABLE_FETCH_TRACING: '1' })).toThrow(/GATEHOUSE_ENV=test/);
  });
});
