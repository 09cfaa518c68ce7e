import { z } from 'zod';
import { closeServer, createLogger, installShutdown, listen, parseEnv, testDoubleRefusal } from '@gatehouse/platform';
import { startTelemetry } from '@gatehouse/telemetry';
import { createModelStubApp } from './app.ts';

/** Process entry: `MODEL_STUB_PORT` (default 7103) on 127.0.0.1, graceful shutdown on SIGTERM/SIGINT. */
// A test double: production refuses to boot it (docs/decisions/0180-strict-production-mode.md).
const env = parseEnv(
  { MODEL_STUB_PORT: z.coerce.number().int().min(0).max(65535).default(7103) },
  process.env,
  testDoubleRefusal('the model-stub (GET /requests, /fixtures)'),
);
// Traced as every service: its server spans continue the agent loop's trace (ADR 0260).
const telemetry = startTelemetry('model-stub', process.env.GATEHOUSE_RELEASE ?? 'rel-1');
const log = createLogger('model-stub');
const { app } = createModelStubApp({ log });
const { server, port } = await listen(app, env.MODEL_STUB_PORT);
log.info({ port }, 'model-stub listening');
installShutdown(log, [() => telemetry.shutdown(), () => closeServer(server)]);
