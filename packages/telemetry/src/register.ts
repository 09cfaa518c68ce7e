/**
 * Preload of every service process (`node --import <repo>/packages/telemetry/src/register.ts
 * services/<svc>/src/main.ts`; the stack launcher and the container image pass it): enables
 * the http, express, pg and ioredis auto-instrumentations before the service's modules load.
 * Those packages are CommonJS imported from ESM, so they are patched through the
 * import-in-the-middle loader hook, limited to the instrumented modules. The SDK itself starts
 * later, in `startTelemetry`; until then the instrumentations record into no-op providers.
 * With no trace or metric export configured (or `OTEL_SDK_DISABLED=true`) this does nothing.
 */
import { register } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { exportConfigured } from './config.ts';
import { createInstrumentations, INSTRUMENTED_MODULES, rememberInstrumentations } from './instrumentations.ts';

if (exportConfigured('traces') || exportConfigured('metrics')) {
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include: INSTRUMENTED_MODULES } });
  const instrumentations = createInstrumentations();
  registerInstrumentations({ instrumentations });
  rememberInstrumentations(instrumentations);
}
