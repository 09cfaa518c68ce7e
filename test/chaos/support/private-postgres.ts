import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import pg from 'pg';
import { freePort } from '@gatehouse/testing';

/** A Postgres cluster of one test, on its own port and data folder: it may be restarted or broken. */
export interface PrivatePostgres {
  port: number;
  /** `postgres://postgres@127.0.0.1:<port>/<database>`. */
  url: (database: string) => string;
  /** Creates an empty database and returns its URL. */
  createDatabase: (name: string) => Promise<string>;
  /** `pg_ctl restart -m <mode>` (default `fast`: every backend is terminated); waits until it accepts connections. */
  restart: (mode?: 'smart' | 'fast' | 'immediate') => Promise<void>;
  /** `pg_terminate_backend` on every other backend connected to `database`; returns how many were terminated. */
  terminateBackends: (database: string) => Promise<number>;
  /** Stops the cluster (`-m immediate`) and removes its folder. Safe to call twice. */
  stop: () => void;
}

/** The folder of `initdb` and `pg_ctl`: `PG_BIN`, else the newest `/usr/lib/postgresql/<v>/bin`. */
function pgBin(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  const dir = versions.map((v) => resolve(root, v, 'bin')).find((d) => existsSync(resolve(d, 'initdb')));
  if (!dir) throw new Error('no initdb found: install the Postgres server binaries or set PG_BIN');
  return dir;
}

/** The command line that runs a Postgres binary as the `postgres` OS user when this process is root (initdb refuses root). */
function asPostgres(bin: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}
const run = promisify(execFile);

/**
 * Starts a throw-away cluster: `initdb` (trust auth, user `postgres`) in a temp folder owned by
 * the `postgres` OS user, then `pg_ctl start` on a free port, listening on 127.0.0.1 only, with
 * durability off (a test cluster: `fsync=off`). Stopped when this process exits.
 * @throws Error when the binaries are missing or the server does not start.
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = pgBin();
  const port = await freePort();
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-chaos-pg-'));
  if (process.getuid?.() === 0) execFileSync('chown', ['postgres:postgres', dir]);
  const data = resolve(dir, 'data');
  await run(...asPostgres(resolve(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']), {
    timeout: 120_000,
  });
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c full_page_writes=off -c synchronous_commit=off`;
  const pgCtl = (...args: string[]): [string, string[]] =>
    asPostgres(resolve(bin, 'pg_ctl'), ['-D', data, '-l', resolve(dir, 'server.log'), ...args]);
  await run(...pgCtl('-w', '-t', '60', '-o', opts, 'start'), { timeout: 90_000 });
  let stopped = false;
  const stop = (): void => {
    if (stopped) return;
    stopped = true;
    process.off('exit', stop);
    try {
      // Synchronous: it also runs from the process's `exit` handler.
      execFileSync(...pgCtl('-m', 'immediate', '-w', 'stop'), { stdio: 'ignore', timeout: 30_000 });
    } catch {
      // already down
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', stop);
  const url = (database: string): string => `postgres://postgres@127.0.0.1:${port}/${database}`;
  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: url('postgres') });
    c.on('error', () => {});
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };
  return {
    port,
    url,
    createDatabase: async (name) => {
      await admin((c) => c.query(`CREATE DATABASE ${name}`));
      return url(name);
    },
    restart: async (mode = 'fast') => {
      await run(...pgCtl('-m', mode, '-w', '-t', '60', '-o', opts, 'restart'), { timeout: 90_000 });
    },
    terminateBackends: (database) =>
      admin(async (c) => {
        const r = await c.query(
          'select pg_terminate_backend(pid) as t from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
          [database],
        );
        return r.rows.filter((x: { t: boolean }) => x.t).length;
      }),
    stop,
  };
}
