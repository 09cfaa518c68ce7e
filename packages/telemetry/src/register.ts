/**
 * Preload of every service process (`node --import <repo>/packages/telemetry/src/register.ts
 * services/<svc>/src/main.ts`; the stack launcher and the container image pass it): enables
 * the auto-instrumentations (every one, or those `OTEL_NODE_ENABLED_INSTRUMENTATIONS` /
 * `OTEL_NODE_DISABLED_INSTRUMENTATIONS` select, see `selectedInstrumentations`) before the
 * service's modules load. http, express, pg and ioredis are CommonJS imported from ESM, so they
 * are patched through the import-in-the-middle loader hook, limited to the modules of the
 * selected instrumentations (no hook when none needs one). The hook runs in the service's own
 * thread (`module.registerHooks`) where Node supports it (24.11.1 and later, 22.22.3 and later),
 * else on the loader thread of `module.register`, whose isolate costs each process about 28 MB of
 * RSS (docs/decisions/0460-loader-hook-in-thread.md). The SDK itself starts
 * later, in `startTelemetry`; until then the instrumentations record into no-op providers.
 * With no trace or metric export configured (or `OTEL_SDK_DISABLED=true`) this does nothing.
 */
import { register } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { register as registerInThread, supportsSyncHooks } from 'import-in-the-middle/register-hooks.mjs';
import { exportConfigured } from './config.ts';
import { createInstrumentations, instrumentedModules, rememberInstrumentations, selectedInstrumentations } from './instrumentations.ts';

if (exportConfigured('traces') || exportConfigured('metrics')) {
  // Selected once: an ignored name is warned about once.
  const names = selectedInstrumentations();
  const include = instrumentedModules(names);
  if (include.length && supportsSyncHooks()) registerInThread({ include });
  else if (include.length) register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include } });
  const instrumentations = createInstrumentations(names);
  registerInstrumentations({ instrumentations });
  rememberInstrumentations(instrumentations);
}
