import type { Logger } from './logger.ts';

/** A cleanup step run on SIGTERM/SIGINT, in reverse registration order. */
export type Closer = () => Promise<void> | void;

/** How often a process started with `GATEHOUSE_EXIT_WITH_PARENT=1` checks that its parent still runs, ms. */
export const PARENT_CHECK_INTERVAL_MS = 1000;

/** Options of {@link installShutdown}. */
export interface ShutdownOptions {
  /**
   * Shut down, as on SIGTERM, once the process that started this one is gone (it was reparented):
   * a test or demo stack's services end with the test worker or demo that owned them, even when
   * that was SIGKILLed and could not stop them. Default: `GATEHOUSE_EXIT_WITH_PARENT=1`, which the
   * test harness's and the demo's stacks set; `stack up`'s services outlive a dead supervisor on
   * purpose (`stack down` stops them by their pid files, docs/decisions/0121-local-stack-supervision.md).
   */
  exitWithParent?: boolean;
}

/**
 * Graceful shutdown: on SIGTERM or SIGINT, runs the closers (last registered first: stop
 * taking work, finish in-flight jobs, close pools) within `graceMs` (default 10 000 ms), then
 * exits 0; exits 1 if a closer fails or the grace period runs out. Returns the shutdown itself,
 * for a process that must end on its own: `exitCode` (default 0) is the code it exits with when
 * every closer succeeds. With `exitWithParent` ({@link ShutdownOptions}) the same shutdown runs
 * within {@link PARENT_CHECK_INTERVAL_MS} of the parent's end.
 */
export function installShutdown(
  log: Logger,
  closers: Closer[],
  graceMs = 10_000,
  opts: ShutdownOptions = { exitWithParent: process.env.GATEHOUSE_EXIT_WITH_PARENT === '1' },
): (exitCode?: number) => Promise<void> {
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
  if (opts.exitWithParent) watchParent(log, () => void run());
  return run;
}

/** Calls `gone` once the parent this process started under is no longer its parent (checked every {@link PARENT_CHECK_INTERVAL_MS}). */
function watchParent(log: Logger, gone: () => void): void {
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    log.warn({ parent }, 'the process that started this one is gone: shutting down (GATEHOUSE_EXIT_WITH_PARENT)');
    gone();
  }, PARENT_CHECK_INTERVAL_MS);
  timer.unref();
}
