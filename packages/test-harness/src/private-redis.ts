import { spawn, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { freePort } from './infrastructure.ts';

/**
 * A memory-only `redis-server` of one test, on its own port: a test may kill or restart it (never
 * the shared server). Without persistence a restart loses every key, as a production Redis
 * without append-only files does.
 */
export interface PrivateRedis {
  port: number;
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  /** SIGKILLs the server and waits until it has exited: everything it held is gone. Safe to call twice. */
  kill: () => Promise<void>;
  /** Starts a fresh, empty server on the same port and waits until it answers PING (after {@link kill}). */
  restartEmpty: () => Promise<void>;
  /** {@link kill}, then {@link restartEmpty}. */
  restart: () => Promise<void>;
  /** SIGSTOP: the server keeps its connections open and answers nothing — a Redis that hangs, not one that is down. */
  freeze: () => void;
  /** SIGCONT after {@link freeze}: it answers what was sent meanwhile. */
  thaw: () => void;
  /** Kills the server for good (no exit hook left behind). */
  stop: () => Promise<void>;
}

/** Resolves once `url` answers PING. @throws Error after `deadlineMs` (default 30 000 ms). */
async function answersPing(url: string, deadlineMs = 30_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on('error', () => undefined); // refused while the server starts: the loop retries
    try {
      await r.connect();
      if ((await r.ping()) === 'PONG') return;
    } catch {
      if (Date.now() > until) throw new Error(`redis ${url} did not answer within ${deadlineMs} ms`);
    } finally {
      r.disconnect();
    }
    await new Promise((res) => setTimeout(res, 100));
  }
}

/**
 * Starts `redis-server` (from PATH) on `port` (default: a free one), bound to 127.0.0.1, with
 * `--save ''` and `--appendonly no`, as a child of this process (killed when it exits).
 * @throws Error when the server does not answer within 30 s.
 */
export async function startPrivateRedis(port?: number): Promise<PrivateRedis> {
  const p = port ?? (await freePort());
  const url = `redis://127.0.0.1:${p}`;
  let child: ChildProcess | null = null;
  const restartEmpty = async (): Promise<void> => {
    const c = spawn('redis-server', ['--port', String(p), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    child = c;
    const failed = new Promise<never>((_, rej) =>
      c.once('error', (err) => rej(new Error(`redis-server could not be started: ${err.message}`))),
    );
    await Promise.race([answersPing(url), failed]);
  };
  const kill = async (): Promise<void> => {
    const c = child as ChildProcess | null;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((done) => c.once('exit', done));
    c.kill('SIGKILL');
    await gone;
  };
  const onExit = (): void => void (child as ChildProcess | null)?.kill('SIGKILL');
  process.once('exit', onExit);
  await restartEmpty();
  return {
    port: p,
    url,
    kill,
    restartEmpty,
    restart: async () => {
      await kill();
      await restartEmpty();
    },
    freeze: () => void (child as ChildProcess | null)?.kill('SIGSTOP'),
    thaw: () => void (child as ChildProcess | null)?.kill('SIGCONT'),
    stop: async () => {
      process.off('exit', onExit);
      await kill();
    },
  };
}
