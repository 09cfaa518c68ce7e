import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { resolve } from 'node:path';
import pg from 'pg';
import { freePort } from './infrastructure.ts';

/**
 * Folder of the Postgres server binaries: `PG_BIN`, else the newest Debian layout
 * (`/usr/lib/postgresql/<version>/bin`) that has `initdb`, else the version 15 path (whose absence
 * the first tool call reports).
 */
const PG_BIN = process.env.PG_BIN ?? newestPgBin() ?? '/usr/lib/postgresql/15/bin';

/**
 * `runuser` by its full path: it lives in an sbin folder, which a minimal PATH (e.g. `env -i`)
 * lacks, and a spawn that cannot find its program never exits.
 */
const RUNUSER = ['/usr/sbin/runuser', '/sbin/runuser', '/usr/bin/runuser', '/bin/runuser'].find((p) => existsSync(p)) ?? 'runuser';

function newestPgBin(): string | undefined {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  return versions.map((v) => resolve(root, v, 'bin')).find((d) => existsSync(resolve(d, 'initdb')));
}

/** How `pg_ctl` stops the server (see `pg_ctl --help`): `fast` ends sessions with 57P01. */
export type PgStopMode = 'smart' | 'fast' | 'immediate';

/** A throw-away Postgres cluster of one test: its own data folder, port and postmaster. */
export interface PrivatePostgres {
  /** Server URL without a database (`postgres://postgres@127.0.0.1:<port>`); append `/<db>`. */
  url: string;
  port: number;
  /** The temp folder holding the data directory, the socket and `postgres.log`. */
  dir: string;
  /** `pg_ctl restart -m <mode>` (default `fast`), waiting until the server accepts connections. */
  restart: (opts?: { mode?: PgStopMode }) => Promise<void>;
  /** `pg_ctl stop -m <mode>` (default `fast`), waiting until it is down. */
  stop: (opts?: { mode?: PgStopMode }) => Promise<void>;
  /** `pg_ctl start`, waiting until the server accepts connections. */
  start: () => Promise<void>;
  /**
   * `pg_terminate_backend` on every client backend (of `database` only, when given) except the
   * one asking. Resolves with how many were terminated.
   */
  terminateBackends: (opts?: { database?: string }) => Promise<number>;
  /** Stops the server (`immediate`) and removes the folder. */
  destroy: () => Promise<void>;
}

/**
 * Runs a Postgres binary as the `postgres` OS user when this process is root (initdb refuses
 * root). Settles on the tool's exit, not on its pipes closing: the postmaster that `pg_ctl start`
 * leaves behind would hold them open.
 * @throws Error with the tool's stderr when it exits non-zero.
 */
async function pgTool(tool: string, args: string[]): Promise<void> {
  const asRoot = userInfo().uid === 0;
  const [cmd, argv] = asRoot ? [RUNUSER, ['-u', 'postgres', '--', resolve(PG_BIN, tool), ...args]] : [resolve(PG_BIN, tool), args];
  const child = spawn(cmd, argv as string[], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((res, rej) => {
    child.once('exit', res);
    child.once('error', (err) => rej(new Error(`${cmd} could not be started: ${err.message}`)));
  });
  child.stderr.destroy();
  if (code !== 0) throw new Error(`${tool} ${args.join(' ')} exited ${code}: ${stderr.trim()}`);
}

/** `pg_ctl stop -m immediate` of the cluster in `data`, synchronously (a process's `exit` handler); nothing when it is down. */
function stopImmediatelySync(data: string): void {
  try {
    execFileSync(userInfo().uid === 0 ? RUNUSER : resolve(PG_BIN, 'pg_ctl'), [
      ...(userInfo().uid === 0 ? ['-u', 'postgres', '--', resolve(PG_BIN, 'pg_ctl')] : []),
      '-D',
      data,
      '-m',
      'immediate',
      'stop',
    ]);
  } catch {
    // already stopped
  }
}

/**
 * Creates and starts a private Postgres cluster (initdb, trust auth for `postgres`, loopback on a
 * free port, fsync off) in a temp folder, for tests that restart, stop or kill the database
 * without touching the shared server. Stopped (immediate) when this process exits, if still up.
 * @throws Error when `initdb` or `pg_ctl` fail (their stderr in the message).
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-pg-'));
  const data = resolve(dir, 'data');
  const log = resolve(dir, 'postgres.log');
  if (userInfo().uid === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
  }
  const port = await freePort();
  await pgTool('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  appendFileSync(
    resolve(data, 'postgresql.conf'),
    [
      `port = ${port}`,
      `listen_addresses = '127.0.0.1'`,
      `unix_socket_directories = '${dir}'`,
      'fsync = off',
      'max_connections = 200',
      '',
    ].join('\n'),
  );
  const ctl = (args: string[]): Promise<void> => pgTool('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '60', ...args]);
  const url = `postgres://postgres@127.0.0.1:${port}`;
  const stopAtExit = (): void => stopImmediatelySync(data);
  process.once('exit', stopAtExit);
  await ctl(['start']);
  return {
    url,
    port,
    dir,
    restart: (opts = {}) => ctl(['-m', opts.mode ?? 'fast', 'restart']),
    stop: (opts = {}) => ctl(['-m', opts.mode ?? 'fast', 'stop']),
    start: () => ctl(['start']),
    terminateBackends: async (opts = {}) => {
      const c = new pg.Client({ connectionString: `${url}/postgres` });
      await c.connect();
      try {
        const r = await c.query<{ n: string }>(
          `SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity
            WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND ($1::text IS NULL OR datname = $1)`,
          [opts.database ?? null],
        );
        return Number(r.rows[0]?.n ?? 0);
      } finally {
        await c.end();
      }
    },
    destroy: async () => {
      process.removeListener('exit', stopAtExit);
      stopAtExit();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A streaming standby of a {@link PrivatePostgres}, made by {@link startPrivateStandby}. */
export interface PrivateStandby {
  /** Server URL without a database, as {@link PrivatePostgres.url}. */
  url: string;
  port: number;
  /** Its data directory (inside the primary's folder, removed with it). */
  dataDir: string;
  /** `pg_ctl promote`, waiting until it accepts writes. */
  promote: () => Promise<void>;
  /** `pg_ctl stop -m <mode>` (default `fast`), waiting until it is down. */
  stop: (opts?: { mode?: PgStopMode }) => Promise<void>;
  /** `pg_ctl start`, waiting until it accepts connections. */
  start: () => Promise<void>;
}

/**
 * Makes and starts a streaming standby of `primary` (`pg_basebackup -R -X stream`, so it streams
 * asynchronously until the primary's `synchronous_standby_names` names it). `fromPort` is where
 * it reaches the primary (default `primary.port`; a proxy's, to cut its stream), `name` its
 * `cluster_name` and so the `application_name` it streams as (default `standby`), `port` and
 * `dataDir` default to a free port and `<primary.dir>/<name>`. Stopped (immediate) when this
 * process exits, if still up; stop it before `primary.destroy()`, which removes its folder.
 * @throws Error when `pg_basebackup` or `pg_ctl` fail (their stderr in the message).
 */
export async function startPrivateStandby(
  primary: PrivatePostgres,
  opts: { fromPort?: number; name?: string; port?: number; dataDir?: string } = {},
): Promise<PrivateStandby> {
  const name = opts.name ?? 'standby';
  const port = opts.port ?? (await freePort());
  const data = opts.dataDir ?? resolve(primary.dir, name);
  const log = resolve(primary.dir, `${name}-${port}.log`);
  const from = String(opts.fromPort ?? primary.port);
  await pgTool('pg_basebackup', ['-h', '127.0.0.1', '-p', from, '-U', 'postgres', '-D', data, '-R', '-X', 'stream', '-c', 'fast']);
  appendFileSync(
    resolve(data, 'postgresql.conf'),
    [`port = ${port}`, `unix_socket_directories = '${primary.dir}'`, `cluster_name = '${name}'`, ''].join('\n'),
  );
  const ctl = (args: string[]): Promise<void> => pgTool('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '60', ...args]);
  process.once('exit', () => stopImmediatelySync(data));
  await ctl(['start']);
  return {
    url: `postgres://postgres@127.0.0.1:${port}`,
    port,
    dataDir: data,
    promote: () => ctl(['promote']),
    stop: (o = {}) => ctl(['-m', o.mode ?? 'fast', 'stop']),
    start: () => ctl(['start']),
  };
}
