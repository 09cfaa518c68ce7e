/**
 * Preload of every service process (`node --import <repo>/packages/telemetry/src/register.ts
 * services/<svc>/src/main.ts`; the stack launcher and the container image pass it): enables
 * the auto-instrumentations (every one, or those `OTEL_NODE_ENABLED_INSTRUMENTATIONS` /
 * `OTEL_NODE_DISABLED_INSTRUMENTATIONS` select, see `selectedInstrumentations`) before the
 * service's modules load. http, express, pg and ioredis are CommonJS imported from ESM, so they
 * are patched through the import-in-the-middle loader hook, limited to the modules of the
 * selected instrumentations (no hook when none needs one). The SDK itself starts
 * later, in `startTelemetry`; until then the instrumentations record into no-op providers.
 * With no trace or metric export configured (or `OTEL_SDK_DISABLED=true`) this does nothing.
 */
import { register } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { exportConfigured } from './config.ts';
import { createInstrumentations, instrumentedModules, rememberInstrumentations, selectedInstrumentations } from './instrumentations.ts';

if (exportConfigured('traces') || exportConfigured('metrics')) {
  // Selected once: an ignored name is warned about once.
  const names = selectedInstrumentations();
  const include = instrumentedModules(names);
  if (include.length) register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include } });
  const instrumentations = createInstrumentations(names);
  registerInstrumentations({ instrumentations });
  rememberInstrumentations(instrumentations);
}
