import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/**
 * Paths pino removes from every log line: tokens, secrets, raw ticket text and prompts never
 * reach logs (SPEC §4 invariant 7/8).
 */
export const REDACT_PATHS = [
  'authorization',
  'req.headers.authorization',
  '*.authorization',
  'token',
  '*.token',
  'secret',
  '*.secret',
  'text',
  '*.text',
  'prompt',
  '*.prompt',
  'input',
  '*.input',
];

/** Creates the JSON logger of one service (`LOG_LEVEL`, default `info`). */
export function createLogger(service: string): Logger {
  return pino({
    name: service,
    level: process.env.LOG_LEVEL ?? 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    base: { service },
  });
}
