/**
 * Resolves or rejects with `work`, or rejects with `Error("timed out after <ms> ms")` once `ms`
 * milliseconds pass first. `work` itself goes on; only the wait for it is bounded.
 */
export async function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
