import { z } from 'zod';
import { webhookSecretKeyEnv } from '@gatehouse/platform';
import { DEFAULT_STREAM_LIMITS } from './http/stream-slots.ts';

/** agent-loop settings beyond the base ones. Budgets are per workflow. */
export const agentLoopEnv = {
  ...webhookSecretKeyEnv,
  AGENT_LOOP_PORT: z.coerce.number().int().min(0).max(65535).default(7101),
  /** Overrides the release manifest's model name. */
  MODEL_NAME: z.string().optional(),
  /** Key for the model API; the stub accepts any non-empty key. */
  OPENAI_API_KEY: z.string().min(1).default('stub-key'),
  /**
   * Overrides of the release manifest's support-pack budgets (unset: the manifest's): model
   * rounds, tool calls (failed validations count), …
   */
  MAX_ROUNDS: z.coerce.number().int().positive().optional(),
  MAX_TOOL_CALLS: z.coerce.number().int().positive().optional(),
  /** …working wall time in seconds (time waiting for a human decision does not count), … */
  WALL_TIME_SECONDS: z.coerce.number().int().positive().optional(),
  /** …and model spend in micro-USD, priced by the release's model entry. */
  MAX_SPEND_MICRO_USD: z.coerce.number().int().positive().optional(),
  /**
   * Model spend one tenant may use per UTC day, micro-USD (default 100 USD), summed over every
   * run's recorded model turns; a run whose tenant reached it stops `budget_exhausted` before its
   * next model request (docs/decisions/0183-tenant-model-spend-cap.md).
   */
  TENANT_DAILY_SPEND_MICRO_USD: z.coerce.number().int().positive().default(100_000_000),
  /** Per-request timeout for the model, ms. */
  MODEL_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /** BullMQ job lock and stalled-job check, ms: how soon a dead loop's turn is redelivered. */
  AGENT_LOOP_LOCK_MS: z.coerce.number().int().positive().default(15_000),
  AGENT_LOOP_STALLED_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
  /** Support bundle override (default: the release manifest's). */
  POLICY_REVISION: z.string().optional(),
  /** Active change-pack bundle (docs/product/policy-rules.md#change-rules). */
  CHANGE_POLICY_REVISION: z.string().optional(),
  /** Folder of policy bundles (default: the repository's `policy/`). */
  POLICY_DIR: z.string().optional(),
  /** Event streams (`GET /v1/workflows/:id/events`): bounded re-read of the ledger, ms, in case a notification was missed. */
  EVENTS_POLL_MS: z.coerce.number().int().min(100).max(60_000).default(5_000),
  /** Event streams: a `: heartbeat` comment line every this many ms. */
  EVENTS_HEARTBEAT_MS: z.coerce.number().int().min(100).max(120_000).default(15_000),
  /** Event streams: open at once per user and per tenant in this process; past them 429 (docs/decisions/0250). */
  EVENTS_MAX_STREAMS_PER_USER: z.coerce.number().int().min(1).max(10_000).default(DEFAULT_STREAM_LIMITS.perUser),
  EVENTS_MAX_STREAMS_PER_TENANT: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_STREAM_LIMITS.perTenant),
  /** Webhook delivery worker (docs/decisions/0250): `off` leaves deliveries to other replicas. */
  WEBHOOK_DELIVERY: z.enum(['on', 'off']).default('on'),
  /** How often due webhook deliveries are looked for, ms. */
  WEBHOOK_POLL_MS: z.coerce.number().int().min(50).max(60_000).default(1_000),
  /** Attempts before a delivery is marked `failed`. */
  WEBHOOK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(12),
  /** Age after which a still-failing delivery is marked `failed`, ms (default 24 h). */
  WEBHOOK_MAX_AGE_MS: z.coerce.number().int().positive().default(86_400_000),
  /** First retry delay, ms (doubling, jittered), and its ceiling. */
  WEBHOOK_RETRY_BASE_MS: z.coerce.number().int().positive().default(2_000),
  WEBHOOK_RETRY_MAX_MS: z.coerce.number().int().positive().default(900_000),
  /** One delivery attempt's time limit, ms. */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
};
