import type { Logger } from './logger.ts';

/** A cleanup step run on SIGTERM/SIGINT, in reverse registration order. */
export type Closer = () => Promise<void> | void;

/**
 * Graceful shutdown: on SIGTERM or SIGINT, runs the closers (last registered first: stop
 * taking work, finish in-flight jobs, close pools) within `graceMs` (default 10 000 ms), then
 * exits 0; exits 1 if a closer fails or the grace period runs out. Returns the shutdown itself,
 * for a process that must end on its own: `exitCode` (default 0) is the code it exits with when
 * every closer succeeds.
 */
export function installShutdown(log: Logger, closers: Closer[], graceMs = 10_000): (exitCode?: number) => Promise<void> {
  let started = false;
  const run = async (exitCode = 0): Promise<void> => {
    if (started) return;
    started = true;
    const timer = setTimeout(() => {
      log.error('shutdown grace period exceeded');
      process.exit(1);
    }, graceMs);
    timer.unref();
    let ok = true;
    for (const close of [...closers].reverse()) {
      try {
        await close();
      } catch (err) {
        ok = false;
        log.error({ err }, 'closer failed');
      }
    }
    log.info('stopped');
    process.exit(ok ? exitCode : 1);
  };
  process.once('SIGTERM', () => void run());
  process.once('SIGINT', () => void run());
  return run;
}
