/** The dependencies an operator's command names when it cannot reach them. */
export type CheckedDependency = 'postgres' | 'redis' | 'system_of_record';

/** The `host:port` of a Postgres, Redis or HTTP URL (never its credentials), for messages. */
export function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'the configured server';
  }
}

/** Host and port of `url` for a command line, with the scheme's default port when it names none. */
function hostAndPort(url: string, defaultPort: number): { host: string; port: string } {
  try {
    const u = new URL(url);
    return { host: u.hostname || '127.0.0.1', port: u.port || String(defaultPort) };
  } catch {
    return { host: '<host>', port: String(defaultPort) };
  }
}

/**
 * How an operator checks by hand that a dependency answers, for the message of a command that
 * could not reach it: the setting that points at it and a command to try — `pg_isready` for
 * Postgres (`DATABASE_URL`), `redis-cli … ping` for Redis (`REDIS_URL`), `curl` on `/readyz` of the
 * systems of record (`STAGING_URL`). `url` is the one the command used (credentials never shown).
 */
export function dependencyCheckHint(dependency: CheckedDependency, url: string): string {
  switch (dependency) {
    case 'postgres': {
      const { host, port } = hostAndPort(url, 5432);
      return `check DATABASE_URL and that Postgres answers: pg_isready -h ${host} -p ${port}`;
    }
    case 'redis': {
      const { host, port } = hostAndPort(url, 6379);
      return `check REDIS_URL and that Redis answers: redis-cli -h ${host} -p ${port} ping`;
    }
    case 'system_of_record': {
      let base = 'STAGING_URL';
      try {
        const u = new URL(url);
        base = `${u.protocol}//${u.host}`;
      } catch {
        // an unparsable URL: name the setting only
      }
      return `check STAGING_URL and that the systems of record answer: curl -s ${base}/readyz`;
    }
  }
}
