import { spawn, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';

/** A private, memory-only redis-server a test may kill (never the shared one). */
export interface PrivateRedis {
  port: number;
  url: string;
  /** SIGKILLs the server and waits for it to exit: everything it held is gone. */
  kill: () => Promise<void>;
  /** Starts a fresh, empty server on the same port and waits until it answers PING. */
  restartEmpty: () => Promise<void>;
}

async function waitForPing(url: string, deadlineMs = 15_000): Promise<void> {
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

/** Starts `redis-server --port <port> --save '' --appendonly no` (no persistence: a restart loses every key). */
export async function startPrivateRedis(port: number): Promise<PrivateRedis> {
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess;
  const launch = async (): Promise<void> => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    await waitForPing(url);
  };
  await launch();
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
  };
  process.once('exit', () => child.kill('SIGKILL'));
  return { port, url, kill, restartEmpty: launch };
}
