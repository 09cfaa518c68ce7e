import type { DiagLogger } from '@opentelemetry/api';

/** Default quiet period per distinct message, ms. */
const WINDOW_MS = 60_000;

/** pino's numeric levels, so these lines sort and filter with the service's own. */
const PINO_LEVELS = { error: 50, warn: 40, info: 30, debug: 20, verbose: 10 } as const;

/**
 * The OpenTelemetry SDK's own log (export failures, dropped spans) as single-line JSON on
 * stderr in the shape of the service's pino lines (numeric `level`, `time`, `service`, `msg`), at most one line per distinct message per `windowMs` (default 60 s) with the count of
 * repeats it held back: an unreachable collector fails every export, and that must not flood
 * the service log. The message's error, if any, contributes only its `message`.
 */
export function quietDiagLogger(
  service: string,
  windowMs = WINDOW_MS,
  write: (line: string) => void = (l) => process.stderr.write(l),
): DiagLogger {
  const lastAt = new Map<string, { atMs: number; held: number }>();
  const emit =
    (level: keyof typeof PINO_LEVELS) =>
    (message: string, ...args: unknown[]): void => {
      const detail = args
        .map((a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : (a as { message?: unknown })?.message))
        .filter((x) => typeof x === 'string')
        .join('; ');
      const key = `${level}:${message.slice(0, 80)}`;
      const now = Date.now();
      const seen = lastAt.get(key);
      if (seen && now - seen.atMs < windowMs) {
        seen.held++;
        return;
      }
      lastAt.set(key, { atMs: now, held: 0 });
      const line = {
        level: PINO_LEVELS[level],
        time: now,
        service,
        msg: `opentelemetry: ${message}`,
        ...(detail ? { detail } : {}),
        ...(seen?.held ? { repeated: seen.held } : {}),
      };
      write(`${JSON.stringify(line)}\n`);
    };
  return { error: emit('error'), warn: emit('warn'), info: emit('info'), debug: emit('debug'), verbose: emit('verbose') };
}
