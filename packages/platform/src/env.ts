import { resolve } from 'node:path';
import { z, type ZodObject, type ZodRawShape } from 'zod';
import { repoRoot, testFaultProblems, testFaults } from '@gatehouse/contracts';
import { DEFAULT_AUDIT_GATE, type AuditGate } from '@gatehouse/ledger';
import { productionProblems } from './production.ts';
import { requestReadTimeoutEnv } from './http-server.ts';

/**
 * Settings every Gatehouse process shares. `GATEHOUSE_ENV` defaults to `production`: local and
 * test runs say so explicitly (`./run`, the local stack and the test harness set it). The other
 * defaults are the local development values, which production refuses (see
 * {@link productionProblems}, docs/decisions/0180-strict-production-mode.md).
 */
export const baseEnvShape = {
  GATEHOUSE_ENV: z.enum(['local', 'test', 'production']).default('production'),
  DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/gatehouse'),
  REDIS_URL: z.string().default('redis://127.0.0.1:6379'),
  /** BullMQ key prefix; tests give each file its own. */
  QUEUE_PREFIX: z.string().default('gh'),
  /** Release id of this process: workers consume only this release's queues. */
  GATEHOUSE_RELEASE: z
    .string()
    .regex(/^[a-z0-9][a-z0-9.-]{0,40}$/)
    .default('rel-1'),
  /** HS256 secret for user bearer tokens in local mode. */
  GATEHOUSE_AUTH_SECRET: z.string().min(16).default('local-auth-secret-change-me'),
  /** JWKS URL for user tokens (replaces the local secret when set; required in production). */
  GATEHOUSE_AUTH_JWKS_URL: z.string().url().optional(),
  /** Expected `iss` of user tokens in JWKS mode (required in production). */
  GATEHOUSE_AUTH_ISSUER: z.string().min(1).optional(),
  /** Expected `aud` of user tokens in JWKS mode (required in production). */
  GATEHOUSE_AUTH_AUDIENCE: z.string().min(1).optional(),
  /** Accepted JWS algorithms of user tokens in JWKS mode, comma-separated, e.g. `RS256,ES256` (required in production; never HS*). */
  GATEHOUSE_AUTH_ALGORITHMS: z
    .string()
    .optional()
    .transform((v) =>
      v
        ? v
            .split(',')
            .map((a) => a.trim())
            .filter(Boolean)
        : undefined,
    ),
  /**
   * Longest lifetime of a user bearer token, seconds: `exp - iat` above it is refused 401
   * `invalid_token`, as is a token without `exp` (docs/decisions/0688-every-bearer-token-expires.md).
   */
  GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S: z.coerce.number().int().positive().default(86_400),
  /**
   * How long a service may answer from its cache of user token revocations, ms (default 1000, at
   * most 10 000; 0 reads the ledger on every request): the bound on how late a revocation is seen
   * (docs/decisions/0695-user-tokens-can-be-revoked.md).
   */
  GATEHOUSE_AUTH_REVOCATION_CACHE_MS: z.coerce.number().int().min(0).max(10_000).default(1000),
  /** Key for the HMAC that hashes actor ids in audit events. */
  GATEHOUSE_AUDIT_HMAC_KEY: z.string().min(16).default('local-audit-hmac-key-change-me'),
  STAGING_URL: z.string().url().default('http://127.0.0.1:7104'),
  /**
   * Responses API base URL. Unset: the local model-stub, unless `OPENAI_API_KEY` is set, in which
   * case the `openai` client's default (the real API).
   */
  MODEL_BASE_URL: z.string().url().optional(),
  LOG_LEVEL: z.string().default('info'),
  /** How long an API request may go unanswered before 503 `dependency_unavailable`, ms (`responseDeadline`). */
  HTTP_RESPONSE_DEADLINE_MS: z.coerce.number().int().positive().default(10_000),
  /**
   * How long a service's Postgres session may sit idle inside a transaction before Postgres ends
   * it and rolls the transaction back, ms (0: no bound): a replica that stops or hangs mid-transaction
   * (SIGSTOP, a frozen VM) releases its row and advisory locks — the audit chain lock among them —
   * after this long instead of holding every other replica off for as long as it is stopped
   * (docs/decisions/0748-a-stopped-replica-releases-its-locks.md).
   */
  POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS: z.coerce.number().int().min(0).default(30_000),
  /**
   * How long a service waits for a connection of its pool (10 connections), or for a new
   * connection to answer, ms (0: no bound). Past it the wait fails with node-postgres's "timeout
   * exceeded when trying to connect", a connection fault: a job goes back unattempted
   * (`PostgresGate.shouldDefer`), a request answers 503. Without it, code that waits for a second
   * connection while its transaction holds one hangs the service for good once as many such waits
   * run as the pool has connections (docs/decisions/0787-a-bounded-wait-for-a-pool-connection.md).
   */
  POSTGRES_POOL_ACQUIRE_TIMEOUT_MS: z.coerce.number().int().min(0).default(15_000),
  /** How long reading one request (head and body) may take before 408 `request_timeout`, ms (`listen`). */
  ...requestReadTimeoutEnv,
  /** Window of the abuse limits, seconds (docs/decisions/0181-abuse-limits.md). */
  RATE_LIMIT_WINDOW_SECONDS: z.coerce.number().int().positive().default(60),
  /** Intake requests (`POST /v1/tickets`, `POST /v1/workflows/:id/messages`) per user per window. */
  INTAKE_RATE_PER_USER: z.coerce.number().int().positive().default(30),
  /** Intake requests per tenant per window. */
  INTAKE_RATE_PER_TENANT: z.coerce.number().int().positive().default(300),
  /** Sign-in attempts (approval inbox, ops dashboard) per claimed user per window. */
  SIGNIN_RATE_PER_USER: z.coerce.number().int().positive().default(10),
  /** Sign-in attempts per claimed tenant per window. */
  SIGNIN_RATE_PER_TENANT: z.coerce.number().int().positive().default(100),
  /** Largest downstream response body read (systems of record, the model if read by hand), bytes. */
  DOWNSTREAM_BODY_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(1024 * 1024),
  /**
   * Longest outage of a dependency (ledger, queue store, audit, model, system of record) a run
   * waits through, ms; the wait is not its working time, and past this it stops
   * `dependency_unavailable` (docs/decisions/0110-outage-time.md).
   */
  DEPENDENCY_WAIT_CEILING_MS: z.coerce
    .number()
    .int()
    .positive()
    .default(15 * 60_000),
};

/**
 * Where the minting side (the executor, and the operator CLI's remediations) finds the Ed25519
 * private key of delegated tokens: a PKCS#8 PEM file (docs/decisions/0170-delegated-credentials-bind-the-operation.md).
 * Only minting processes declare it; the local stack creates the key in its state folder.
 */
export const delegationSigningKeyEnv = {
  GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: z.string().min(1).default(resolve(repoRoot, '.gatehouse/delegation-ed25519.pem')),
};

/**
 * Where the systems of record find the public keys that verify delegated tokens: a JWKS file
 * (RFC 7517), every key Ed25519 with a `kid`. Only verifying processes declare it.
 */
export const delegationJwksEnv = {
  GATEHOUSE_DELEGATION_JWKS_PATH: z.string().min(1).default(resolve(repoRoot, '.gatehouse/delegation-jwks.json')),
};

/**
 * The audit-health gate's settings, ms (docs/product/invariants.md#evidence), for every process
 * that starts effects: the executor, and the operator CLI's remediations and change cancels.
 */
export const auditGateEnv = {
  /** The newest audit heartbeat may be this old. */
  AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: z.coerce.number().int().positive().default(DEFAULT_AUDIT_GATE.maxHeartbeatAgeMs),
  /** The oldest event still waiting in `audit_outbox` may be this old. */
  AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: z.coerce.number().int().positive().default(DEFAULT_AUDIT_GATE.maxBacklogAgeMs),
};

/** The {@link AuditGate} of settings parsed with {@link auditGateEnv}. */
export function auditGateOf(env: z.output<ZodObject<typeof auditGateEnv>>): AuditGate {
  return { maxHeartbeatAgeMs: env.AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS, maxBacklogAgeMs: env.AUDIT_HEALTH_MAX_BACKLOG_AGE_MS };
}

/**
 * The audit-health gate of `source` (default `process.env`), parsed with {@link auditGateEnv}
 * alone: for a process that parsed its other settings without it (the CLI).
 * @throws Error naming each invalid setting (a value that is not a positive integer).
 */
export function auditGateFromEnv(source: Record<string, string | undefined> = process.env): AuditGate {
  const r = z.object(auditGateEnv).safeParse(source);
  if (!r.success) throw invalidEnvironment(r.error);
  return auditGateOf(r.data);
}

/** The error of settings that fail their schema: one `  NAME: message` line per issue. */
function invalidEnvironment(error: z.ZodError): Error {
  return new Error(`invalid environment:\n${error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`).join('\n')}`);
}

/**
 * The anchoring settings, for the audit service (which anchors and witnesses) and the operator
 * CLI (`audit verify`, which checks the witness and the anchors' freshness); docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md.
 */
export const auditAnchorEnv = {
  /** How often the audit service anchors the chain head, ms. */
  AUDIT_ANCHOR_INTERVAL_MS: z.coerce.number().int().positive().default(30_000),
  /** How much later than the interval an event may still be unanchored before `audit verify` calls the anchors stale, ms. */
  AUDIT_ANCHOR_SLACK_MS: z.coerce.number().int().nonnegative().default(60_000),
  /**
   * The anchor witness: an append-only JSON-lines file outside Postgres, one line per anchor.
   * Unset: `<state folder>/audit-anchors.jsonl` (`.gatehouse/` by default); required in production.
   */
  AUDIT_ANCHOR_WITNESS_PATH: z.string().min(1).optional(),
};

/** The anchoring settings of {@link auditAnchorEnv}: interval and slack in ms, the witness path when set. */
export interface AuditAnchorSettings {
  intervalMs: number;
  slackMs: number;
  witnessPath: string | undefined;
}

/**
 * The anchoring settings of `source` (default `process.env`), parsed with {@link auditAnchorEnv}
 * alone: for a process that parsed its other settings without them (the CLI).
 * @throws Error naming each invalid setting.
 */
export function auditAnchorFromEnv(source: Record<string, string | undefined> = process.env): AuditAnchorSettings {
  const r = z.object(auditAnchorEnv).safeParse(source);
  if (!r.success) throw invalidEnvironment(r.error);
  return {
    intervalMs: r.data.AUDIT_ANCHOR_INTERVAL_MS,
    slackMs: r.data.AUDIT_ANCHOR_SLACK_MS,
    witnessPath: r.data.AUDIT_ANCHOR_WITNESS_PATH,
  };
}

/**
 * How long the operator CLI waits for Postgres, ms (docs/decisions/0652-cli-dependency-timeouts.md).
 * A hung Postgres (it accepts the TCP connection and never answers) would otherwise hold a
 * command for ever; past these the command ends with exit 4 naming Postgres. The services do not
 * read them: their pools keep waiting, as their outage handling expects.
 */
export const cliPostgresEnv = {
  /** The connection handshake (TCP connect to the first answer) may take this long. */
  CLI_POSTGRES_CONNECT_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
  /**
   * A statement may run (or wait on a lock) this long before Postgres cancels it, and a session
   * may sit idle inside a transaction this long (0: no limit; the client gives up 2 s later on a
   * server that does not answer). Not applied to migrations (`migrate`, `stack up`, `demo`), whose
   * statements may legitimately run longer.
   */
  CLI_POSTGRES_QUERY_TIMEOUT_MS: z.coerce.number().int().nonnegative().default(60_000),
};

/** The CLI's Postgres waits of {@link cliPostgresEnv}, ms; `queryTimeoutMs` 0 means no limit. */
export interface CliPostgresTimeouts {
  connectTimeoutMs: number;
  queryTimeoutMs: number;
}

/**
 * The CLI's Postgres waits of `source` (default `process.env`), parsed with {@link cliPostgresEnv} alone.
 * @throws Error naming each invalid setting (not a positive integer, or a negative query timeout).
 */
export function cliPostgresFromEnv(source: Record<string, string | undefined> = process.env): CliPostgresTimeouts {
  const r = z.object(cliPostgresEnv).safeParse(source);
  if (!r.success) throw invalidEnvironment(r.error);
  return { connectTimeoutMs: r.data.CLI_POSTGRES_CONNECT_TIMEOUT_MS, queryTimeoutMs: r.data.CLI_POSTGRES_QUERY_TIMEOUT_MS };
}

/** The parsed base settings. */
export type BaseEnv = z.output<ZodObject<typeof baseEnvShape>>;

/**
 * Parses `process.env` (or `source`) against the base shape extended by `extra`, once, and reads
 * the test-only switches (`testFaults` of the contracts) so a refused one stops the boot.
 * @throws Error listing every invalid variable, or every production problem (test switches
 * included), or every refused test switch (the process should exit at boot).
 */
export function parseEnv<S extends ZodRawShape>(
  extra: S,
  source: Record<string, string | undefined> = process.env,
  productionChecks: (env: BaseEnv & z.output<ZodObject<S>>) => string[] = () => [],
): BaseEnv & z.output<ZodObject<S>> {
  const schema = z.object({ ...baseEnvShape, ...extra });
  const r = schema.safeParse(source);
  if (!r.success) throw invalidEnvironment(r.error);
  const env = r.data as BaseEnv & z.output<ZodObject<S>>;
  if (env.GATEHOUSE_ENV === 'production') {
    const problems = [...productionProblems(env, source), ...productionChecks(env), ...testFaultProblems(source)];
    if (problems.length)
      throw new Error(`refusing to start in production (GATEHOUSE_ENV=production):\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
  // The test-only switches, read and validated once, at boot: a refused one stops the process here.
  testFaults(source);
  return env;
}
