import { z } from 'zod';

/** agent-loop settings beyond the base ones. Budgets are per workflow. */
export const agentLoopEnv = {
  AGENT_LOOP_PORT: z.coerce.number().int().min(0).max(65535).default(7101),
  MODEL_NAME: z.string().default('gatehouse-stub-1'),
  /** Key for the model API; the stub accepts any non-empty key. */
  OPENAI_API_KEY: z.string().min(1).default('stub-key'),
  /** Support-pack budgets per run (issue 6): model rounds, tool calls (failed validations count), */
  MAX_ROUNDS: z.coerce.number().int().positive().default(8),
  MAX_TOOL_CALLS: z.coerce.number().int().positive().default(6),
  /** …working wall time in seconds (time waiting for a human decision does not count), … */
  WALL_TIME_SECONDS: z.coerce.number().int().positive().default(90),
  /** …and spend in model tokens. */
  MAX_SPEND_TOKENS: z.coerce.number().int().positive().default(200_000),
  /** Per-request timeout for the model, ms. */
  MODEL_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /** BullMQ job lock and stalled-job check, ms: how soon a dead loop's turn is redelivered. */
  AGENT_LOOP_LOCK_MS: z.coerce.number().int().positive().default(30_000),
  AGENT_LOOP_STALLED_INTERVAL_MS: z.coerce.number().int().positive().default(30_000),
  POLICY_REVISION: z.string().default('support-p1'),
  /** Folder of policy bundles (default: the repository's `policy/`). */
  POLICY_DIR: z.string().optional(),
};
