import { sql } from 'kysely';
import { AS_A_NEW_TICKET, modelSpendMicroUsd, type ReleaseManifest, testFaults } from '@gatehouse/contracts';
import type { Db, Trx } from '@gatehouse/ledger';

/** The per-tenant daily model-spend cap: micro-USD per UTC day (docs/decisions/0183-tenant-model-spend-cap.md). */
export interface TenantSpendCap {
  dailyMicroUsd: number;
  /** Test-only: the cap is not checked (control-removed test). */
  disabled: boolean;
}

/**
 * Reads the cap from the agent-loop's settings and the test-only switch
 * `GATEHOUSE_TEST_DISABLE_TENANT_SPEND_CAP=1`.
 * @throws Error when the switch is set outside `GATEHOUSE_ENV=test`.
 */
export function readTenantSpendCap(dailyMicroUsd: number, env: Record<string, string | undefined>): TenantSpendCap {
  return { dailyMicroUsd, disabled: testFaults(env).disableTenantSpendCap };
}

/**
 * Model spend of `tenant` since 00:00 UTC today, micro-USD: the usage of every model answer the
 * tenant's workflows paid for today — the turns recorded in `model_turns` and the answers
 * discarded for a follow-up in `discarded_model_answers` (ADR 0680) — priced by `price` (the
 * release's model entry).
 */
export async function tenantSpendToday(db: Db | Trx, tenant: string, price: ReleaseManifest['model']): Promise<number> {
  const today = sql<boolean>`created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`;
  const answers = db
    .selectFrom('model_turns')
    .select(['workflow_id', 'input_tokens', 'output_tokens'])
    .where(today)
    .unionAll(db.selectFrom('discarded_model_answers').select(['workflow_id', 'input_tokens', 'output_tokens']).where(today));
  const r = await db
    .selectFrom(answers.as('t'))
    .innerJoin('workflows as w', 'w.id', 't.workflow_id')
    .select([
      sql<string>`coalesce(sum(t.input_tokens), 0)`.as('input_tokens'),
      sql<string>`coalesce(sum(t.output_tokens), 0)`.as('output_tokens'),
    ])
    .where('w.tenant', '=', tenant)
    .executeTakeFirstOrThrow();
  return modelSpendMicroUsd(price, { input_tokens: Number(r.input_tokens), output_tokens: Number(r.output_tokens) });
}

/**
 * The next step of a run stopped because its tenant reached the daily cap, or null when the
 * tenant may still spend (checked before each model request, like every bound).
 */
export async function tenantCapReached(
  db: Db | Trx,
  tenant: string,
  price: ReleaseManifest['model'],
  cap: TenantSpendCap,
): Promise<string | null> {
  if (cap.disabled) return null;
  const spent = await tenantSpendToday(db, tenant, price);
  if (spent < cap.dailyMicroUsd) return null;
  return `Your organisation reached its daily model-spend cap (${(cap.dailyMicroUsd / 1e6).toFixed(2)} USD, resets 00:00 UTC); resubmit it ${AS_A_NEW_TICKET} after the reset or ask an operator to raise TENANT_DAILY_SPEND_MICRO_USD.`;
}
