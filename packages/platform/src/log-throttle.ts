/** How often one repeating log line may be written, ms. */
export const LOG_REPEAT_INTERVAL_MS = 30_000;

/** At most this many distinct keys are remembered; the oldest is forgotten first. */
const MAX_KEYS = 256;

/**
 * A throttle for a log line that repeats while a dependency is down (a worker's `error` event
 * several times a second, a timer's failure on every tick): `(key, emit)` calls `emit(0)` the
 * first time `key` is seen, then at most once per `intervalMs` (default
 * {@link LOG_REPEAT_INTERVAL_MS}) with how many occurrences were left out since the last line.
 * The first line of an outage is never delayed, and the count shows it went on. Keys are
 * caller-chosen (e.g. the queue and the error's message); at most 256 are remembered. `now` is
 * injectable for tests (ms).
 */
export function logThrottle(
  intervalMs = LOG_REPEAT_INTERVAL_MS,
  now: () => number = Date.now,
): (key: string, emit: (repeated: number) => void) => void {
  const seen = new Map<string, { at: number; left: number }>();
  return (key, emit) => {
    const t = now();
    const last = seen.get(key);
    if (last && t - last.at < intervalMs) {
      last.left += 1;
      return;
    }
    seen.delete(key);
    if (seen.size >= MAX_KEYS) seen.delete(seen.keys().next().value as string);
    seen.set(key, { at: t, left: 0 });
    emit(last?.left ?? 0);
  };
}
