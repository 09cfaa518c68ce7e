import { createDb, DependencyUnavailable, isConnectionFault, type Db, type PoolTimeouts } from '@gatehouse/ledger';
import { cliPostgresFromEnv, dependencyCheckHint, hostOf } from '@gatehouse/platform';

/** node-postgres's messages for a connection handshake that got no answer in time (pool, client). */
const NO_HANDSHAKE = /timeout expired|connection timeout|timeout exceeded when trying to connect/;
/** node-postgres's message for a statement that got no answer in time. */
const NO_RESULT = /Query read timeout/;

/**
 * True for a statement Postgres cancelled at the session's `statement_timeout` (SQLSTATE 57014
 * with its "statement timeout" message; the same code also means a cancel by request) or a session
 * it ended for sitting idle in a transaction too long (25P03).
 */
function endedAtServerBound(err: unknown): boolean {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  return (code === '57014' && /statement timeout/.test(String(message))) || code === '25P03';
}

/**
 * How much longer than its own `statement_timeout` the client waits for an answer, ms: a Postgres
 * that answers cancels the statement itself (rolled back, nothing lands later), so only one that
 * stopped answering reaches the client's bound.
 */
export const CLIENT_BACKSTOP_MS = 2000;

/** How long closing a pool may take before the command goes on without it, ms (a hung Postgres never answers the goodbye). */
const CLOSE_WAIT_MS = 1000;

/**
 * The CLI's bounds on Postgres (`CLI_POSTGRES_CONNECT_TIMEOUT_MS`, `CLI_POSTGRES_QUERY_TIMEOUT_MS`
 * of `source`, default `process.env`), ms: the query setting is the server-side
 * `statementTimeoutMs`, and the client's own `queryTimeoutMs` is {@link CLIENT_BACKSTOP_MS} longer
 * (docs/decisions/0670-cli-statements-end-on-the-server.md). `migration`: the connect bound only —
 * a migration's statement may take as long as it takes.
 * @throws Error naming an invalid setting.
 */
export function cliPostgresTimeouts(
  opts: { migration?: boolean } = {},
  source = process.env,
): Required<Omit<PoolTimeouts, 'idleInTransactionTimeoutMs'>> {
  const t = cliPostgresFromEnv(source);
  const statementTimeoutMs = opts.migration ? 0 : t.queryTimeoutMs;
  return {
    connectTimeoutMs: t.connectTimeoutMs,
    statementTimeoutMs,
    queryTimeoutMs: statementTimeoutMs ? statementTimeoutMs + CLIENT_BACKSTOP_MS : 0,
  };
}

/**
 * `err` as the CLI reports it: a connection fault or an unanswered handshake or statement of
 * Postgres, or a statement or transaction Postgres ended at the CLI's bound, becomes
 * {@link DependencyUnavailable}(`postgres`) naming Postgres (exit 4); anything else (a
 * DependencyUnavailable of Redis included) is returned as it is. `databaseUrl` (optional) puts the
 * server's `host:port` in the message (never the credentials) and how to check it
 * (`dependencyCheckHint`); `timeouts` (optional) the bound that ran out and the setting that sets it.
 */
export function asPostgresFault(err: unknown, databaseUrl?: string, timeouts?: PoolTimeouts): unknown {
  if (err instanceof DependencyUnavailable) return err;
  const message = err instanceof Error ? err.message : String(err);
  const where = databaseUrl ? ` (${hostOf(databaseUrl)})` : '';
  const check = databaseUrl ? `${dependencyCheckHint('postgres', databaseUrl)}, then ` : '';
  if (endedAtServerBound(err)) {
    const bound = timeouts?.statementTimeoutMs ? ` within ${timeouts.statementTimeoutMs} ms, CLI_POSTGRES_QUERY_TIMEOUT_MS` : '';
    return new DependencyUnavailable(
      'postgres',
      `Postgres${where} did not finish a statement of this command${bound} (${message}): it waited on a lock or the server is overloaded; Postgres cancelled it and rolled its transaction back; run the command again`,
      { cause: err },
    );
  }
  const noResult = NO_RESULT.test(message);
  const noHandshake = !noResult && NO_HANDSHAKE.test(message);
  if (!isConnectionFault(err) && !noResult && !noHandshake) return err;
  const bound =
    noResult && timeouts?.queryTimeoutMs
      ? `; no answer to a statement within ${timeouts.queryTimeoutMs} ms, CLI_POSTGRES_QUERY_TIMEOUT_MS${timeouts.statementTimeoutMs ? ` (${timeouts.statementTimeoutMs} ms) + ${CLIENT_BACKSTOP_MS} ms` : ''}`
      : noHandshake && timeouts?.connectTimeoutMs
        ? `; no answer to the connection within ${timeouts.connectTimeoutMs} ms, CLI_POSTGRES_CONNECT_TIMEOUT_MS`
        : '';
  return new DependencyUnavailable(
    'postgres',
    `Postgres${where} is unreachable or not answering (${message}${bound}); ${check}run the command again once it answers`,
    {
      cause: err,
    },
  );
}

/**
 * Closes `db`'s pool, waiting at most {@link CLOSE_WAIT_MS}: a connection to a hung Postgres never
 * finishes closing, and the CLI process exits right after anyway.
 */
export async function closeCliDb(db: Db): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    db.destroy().catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CLOSE_WAIT_MS);
    }),
  ]);
  clearTimeout(timer);
}

/**
 * Runs `fn` on a ledger pool of at most `max` connections to `databaseUrl` bounded by
 * {@link cliPostgresTimeouts}, then closes it ({@link closeCliDb}).
 * @throws DependencyUnavailable(`postgres`) when Postgres cannot be reached or does not answer in
 *   time (exit 4, see {@link asPostgresFault}); whatever else `fn` throws, as it is.
 */
export async function withCliDb<T>(
  databaseUrl: string,
  max: number,
  fn: (db: Db) => Promise<T>,
  opts: { migration?: boolean } = {},
): Promise<T> {
  const timeouts = cliPostgresTimeouts(opts);
  const db = createDb(databaseUrl, max, undefined, timeouts);
  try {
    return await fn(db);
  } catch (err) {
    throw asPostgresFault(err, databaseUrl, timeouts);
  } finally {
    await closeCliDb(db);
  }
}
