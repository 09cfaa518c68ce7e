import { z } from 'zod';
import { webhookSecretKeyEnv } from '@gatehouse/platform';
import { DEFAULT_MAX_WEBHOOKS_PER_TENANT } from './http/webhooks.router.ts';

/** ops dashboard settings beyond the base ones (docs/product/public-contract.md: port 7105). */
export const opsEnv = {
  OPS_PORT: z.coerce.number().int().min(0).max(65535).default(7105),
  /** How often the board re-discovers queues (new release manifests, rows, Redis keys), ms. */
  OPS_QUEUE_DISCOVERY_MS: z.coerce.number().int().positive().default(30_000),
  /** Folder of release manifests (default: the repository's `releases/`). */
  RELEASES_DIR: z.string().optional(),
  /**
   * Active webhook endpoints one tenant may have (docs/decisions/0250-pushed-workflow-events.md):
   * every workflow event of a tenant becomes one delivery per active endpoint, so this bounds
   * the deliveries one tenant's events can cause.
   */
  ...webhookSecretKeyEnv,
  WEBHOOK_MAX_ENDPOINTS_PER_TENANT: z.coerce.number().int().min(1).max(1000).default(DEFAULT_MAX_WEBHOOKS_PER_TENANT),
};
