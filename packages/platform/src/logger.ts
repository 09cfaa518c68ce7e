import { pino, type DestinationStream, type Logger } from 'pino';
import { logCorrelation } from '@gatehouse/telemetry';

export type { Logger } from 'pino';

/**
 * Paths pino removes from every log line (docs/product/invariants.md#untrusted-output and #evidence): credentials — bearer tokens,
 * authorization and cookie headers (also inside errors of HTTP clients), API keys, passwords,
 * secrets, signing keys, delegation credentials — and content that must never be logged: raw
 * ticket text, prompts, model input, tool arguments and results. A path matches the key at the
 * top level and one level down (`*.x`); headers also two levels down (`err.config.headers`).
 */
export const REDACT_PATHS = [
  ...[
    'authorization',
    'Authorization',
    'cookie',
    'token',
    'accessToken',
    'access_token',
    'refreshToken',
    'idToken',
    'bearer',
    'apiKey',
    'api_key',
    'password',
    'secret',
    'clientSecret',
    'client_secret',
    'privateKey',
    'signingKey',
    'credential',
    'credentials',
    'delegation',
    'text',
    'prompt',
    'instructions',
    'input',
    'arguments',
    'output',
    // The model's opaque reasoning (docs/decisions/0145-reasoning-items-in-the-transcript.md).
    'encrypted_content',
    'encryptedContent',
  ].flatMap((k) => [k, `*.${k}`]),
  ...['.authorization', '.Authorization', '.cookie', '["set-cookie"]', '["x-api-key"]'].flatMap((h) => [
    `headers${h}`,
    `*.headers${h}`,
    `*.*.headers${h}`,
  ]),
];

/**
 * Creates the JSON logger of one service (`LOG_LEVEL`, default `info`). Every line carries
 * `service`, and inside a traced request or job the `trace_id` and `span_id` of the active span
 * (so a log line leads to its trace); {@link REDACT_PATHS} are replaced by `[redacted]`.
 * `destination` defaults to stdout (tests pass a stream).
 */
export function createLogger(service: string, destination?: DestinationStream): Logger {
  return pino(
    {
      name: service,
      level: process.env.LOG_LEVEL ?? 'info',
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      base: { service },
      mixin: logCorrelation,
    },
    destination,
  );
}
