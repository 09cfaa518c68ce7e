import { z } from 'zod';
import { parseEnv, testDoubleRefusal } from '@gatehouse/platform';

/**
 * Environment of the staging process: the shared base (`DATABASE_URL`,
 * `GATEHOUSE_DELEGATION_SECRET`, `LOG_LEVEL`, …) plus `STAGING_PORT` (default 7104, docs/product/public-contract.md).
 * Refused in production: its test endpoints (`/faults`, `/requests`) must never be reachable there.
 * @throws Error listing every invalid variable (in production, every problem).
 */
export function loadStagingEnv(source: Record<string, string | undefined> = process.env) {
  return parseEnv(
    { STAGING_PORT: z.coerce.number().int().min(0).max(65_535).default(7104) },
    source,
    testDoubleRefusal('the staging systems (/faults, /requests)'),
  );
}

/** Parsed staging environment. */
export type StagingEnv = ReturnType<typeof loadStagingEnv>;
