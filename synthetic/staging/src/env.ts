import { z } from 'zod';
import { delegationJwksEnv, parseEnv, testDoubleRefusal } from '@gatehouse/platform';

/**
 * Environment of the staging process: the shared base (`DATABASE_URL`, `LOG_LEVEL`, …), the
 * verifying side's `GATEHOUSE_DELEGATION_JWKS_PATH`, `GATEHOUSE_EPOCH_DATABASE_URL` (the ledger
 * database holding the revocation epoch; default `DATABASE_URL`) and `STAGING_PORT` (default 7104,
 * docs/product/public-contract.md). Refused in production: its test endpoints (`/faults`,
 * `/requests`) must never be reachable there.
 * @throws Error listing every invalid variable (in production, every problem).
 */
export function loadStagingEnv(source: Record<string, string | undefined> = process.env) {
  return parseEnv(
    {
      ...delegationJwksEnv,
      GATEHOUSE_EPOCH_DATABASE_URL: z.string().optional(),
      STAGING_PORT: z.coerce.number().int().min(0).max(65_535).default(7104),
    },
    source,
    testDoubleRefusal('the staging systems (/faults, /requests)'),
  );
}

/** Parsed staging environment. */
export type StagingEnv = ReturnType<typeof loadStagingEnv>;
