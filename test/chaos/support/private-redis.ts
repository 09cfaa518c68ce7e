import { spawn, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { freePort } from '@gatehouse/testing';

/** A Redis server of one test, without persistence: a restart loses every key. */
export interface PrivateRedis {
  port: number;
  url: string;
  /** Kills the server (SIGKILL) and starts an empty one on the same port; waits until it answers PING. */
  restart: () => Promise<void>;
  /** Kills the server. Safe to call twice. */
  stop: () => Promise<void>;
}

async function answersPing(url: string, deadlineMs: number): Promise<void> {
  for (;;) {
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on('error', () => {});
    try {
      await r.connect();
      if ((await r.ping()) === 'PONG') return;
    } catch {
      // not up yet
    } finally {
      r.disconnect();
    }
    if (Date.now() > deadlineMs) throw new Error(`redis at ${url} did not answer in time`);
    await new Promise((done) => setTimeout(done, 100));
  }
}

/**
 * Starts `redis-server` (from PATH) on a free port, bound to 127.0.0.1, with `--save ''` and
 * `--appendonly no`, as a child of this process (killed when it exits).
 * @throws Error when the server does not answer within 30 s.
 */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  const launch = async (): Promise<void> => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    await answersPing(url, Date.now() + 30_000);
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
  await launch();
  return {
    port,
    url,
    restart: async () => {
      await kill();
      await launch();
    },
    stop: async () => {
      process.off('exit', onExit);
      await kill();
    },
  };
}
