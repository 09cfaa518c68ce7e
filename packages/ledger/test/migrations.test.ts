import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Migrator, sql, type Kysely } from 'kysely';
import { migrations } from '@gatehouse/migrations';
import { migrate, type Db } from '../src/index.ts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

const LEDGER_TABLES = [
  'actions',
  'approvals',
  'budgets',
  'conversation_items',
  'credential_epochs',
  'decision_log',
  'model_turns',
  'operations',
  'outbox',
  'proposals',
  'releases',
  'tool_switches',
  'workflows',
];
const AUDIT_TABLES = ['audit_anchors', 'audit_heartbeat', 'audit_log', 'audit_outbox'];
const CHANGE_PACK_TABLES = ['change_plans'];
const RECONCILIATION_TABLES = ['reconciliation_items'];
const RELEASE_ROLLOUT_TABLES = ['quarantined_jobs'];
/** Tables each migration creates; entries of migrations not (yet) registered are ignored. */
const TABLES_OF: Record<string, string[]> = {
  '20261130000100-CreateLedger': LEDGER_TABLES,
  '20261130000200-CreateAudit': AUDIT_TABLES,
  '20261130000300-ChangePack': CHANGE_PACK_TABLES,
  '20261130000400-Reconciliation': RECONCILIATION_TABLES,
  '20261130000500-ReleaseRollout': RELEASE_ROLLOUT_TABLES,
  '20261130000600-AuditTraceContext': [],
  '20261130000700-RefundWindowIndex': [],
  '20261130000800-BudgetWaits': [],
  '20261201000100-ReleaseOverrides': ['release_overrides'],
  '20261201000145-ReasoningItems': [],
  '20261201000200-OutboxJobIdIndex': [],
  '20261201000300-WorkflowEvents': ['webhook_deliveries', 'webhook_endpoints', 'workflow_events'],
  '20261201000400-OperationTokenEpoch': [],
  '20261201000500-ToolReenables': ['tool_reenable_stages'],
  '20261201000900-ActionTenantAndUser': [],
  '20261202000100-EpochBumpIndex': [],
  '20261202000200-MonitorPasses': ['monitor_passes'],
  '20261203000100-LockedRefundSums': [],
  '20261205000100-FollowUpIdempotencyKey': [],
  '20261206000100-ReleaseFirstActive': [],
  '20261206000680-DiscardedModelAnswers': ['discarded_model_answers'],
  '20261206000682-RefundWindowsFromTheClaim': [],
  '20261206000686-RefundsOutsideSteps': [],
  '20261206000689-FollowUpAnswer': [],
  '20261206000695-UserTokenRevocations': ['user_token_not_before', 'user_token_revoked_jtis'],
  '20261206000697-RefundsOutsideStepsByWindow': [],
  '20261206000699-ReleaseDrainingSince': [],
  '20261206000702-RefundSumsReadCandidatesOnce': [],
  '20261207000724-WorkflowWritesWithheld': [],
  '20261208000795-AuditLossHold': ['audit_loss_hold'],
};
const tablesUpTo = (names: string[]): string[] => names.flatMap((n) => TABLES_OF[n] ?? []).sort();
const ALL_TABLES = tablesUpTo(Object.keys(migrations));

let t: TestDatabase;
let k: Kysely<unknown>;

async function appTables(): Promise<string[]> {
  const r = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.tables
    WHERE table_schema = 'public' AND table_name NOT LIKE 'kysely_%' ORDER BY table_name`.execute(k);
  return r.rows.map((x) => x.table_name);
}

async function appFunctions(): Promise<string[]> {
  const r = await sql<{ proname: string }>`
    SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'`.execute(k);
  return r.rows.map((x) => x.proname);
}

beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
  k = t.db as unknown as Kysely<unknown>;
});
afterAll(async () => {
  await t?.drop();
});

describe('migrations on an empty database', () => {
  it('starts empty', async () => {
    expect(await appTables()).toEqual([]);
  });

  it('up creates every table and the append-only trigger', async () => {
    const result = await migrate(k);
    expect(result.results?.map((r) => [r.migrationName, r.direction, r.status])).toEqual(
      Object.keys(migrations)
        .sort()
        .map((name) => [name, 'Up', 'Success']),
    );
    expect(await appTables()).toEqual(ALL_TABLES);
    expect(await appFunctions()).toContain('audit_log_append_only');
    // The refund limits' sums, plain and under their locks (ADR 0470).
    expect(await appFunctions()).toEqual(expect.arrayContaining(['refund_limit_sums', 'refund_limit_sums_locked']));
    // The rolling-window index the R5/R6 sums read (0700).
    const indexes = await sql<{ indexdef: string }>`SELECT indexdef FROM pg_indexes WHERE indexname = 'actions_by_tool_time'`.execute(k);
    expect(indexes.rows.map((r) => r.indexdef)).toEqual([expect.stringContaining('(tool, created_at)')]);
    const epoch = await sql<{ epoch: number }>`SELECT epoch FROM credential_epochs WHERE id = 1`.execute(k);
    expect(epoch.rows).toEqual([{ epoch: 1 }]);
  });

  it('up again is a no-op', async () => {
    const result = await migrate(k);
    expect(result.results).toEqual([]);
    expect(await appTables()).toEqual(ALL_TABLES);
  });

  it('down removes every table and function', async () => {
    await migrate(k, 'down');
    expect(await appTables()).toEqual([]);
    expect(await appFunctions()).not.toContain('audit_log_append_only');
    expect(await appFunctions()).not.toContain('refund_limit_sums');
    expect(await appFunctions()).not.toContain('refund_limit_sums_locked');
  });

  it('each migration goes up and down on its own', async () => {
    const migrator = new Migrator({ db: k, provider: { getMigrations: async () => migrations } });
    const names = Object.keys(migrations).sort();
    expect(names.every((n) => TABLES_OF[n])).toBe(true);
    for (const name of names) {
      const r = await migrator.migrateUp();
      expect(r.error).toBeUndefined();
      expect(r.results?.map((x) => x.migrationName)).toEqual([name]);
    }
    expect(await appTables()).toEqual(ALL_TABLES);
    for (let left = names.length - 1; left >= 0; left--) {
      const down = await migrator.migrateDown();
      expect(down.error).toBeUndefined();
      expect(down.results?.map((x) => x.migrationName)).toEqual([names[left]]);
      expect(await appTables()).toEqual(tablesUpTo(names.slice(0, left)));
    }
  });

  it('up once more leaves the full schema', async () => {
    await migrate(k);
    expect(await appTables()).toEqual(ALL_TABLES);
  });
});

describe('audit_log is append-only', () => {
  beforeAll(async () => {
    const db: Db = t.db;
    await sql`INSERT INTO audit_log (seq, outbox_id, event, prev_hash, hash)
      VALUES (1, 1, '{"type":"run.started"}'::jsonb, ${'0'.repeat(64)}, ${'a'.repeat(64)})`.execute(db);
  });

  it('UPDATE is refused', async () => {
    await expect(sql`UPDATE audit_log SET event = '{"type":"run.stopped"}'::jsonb WHERE seq = 1`.execute(t.db)).rejects.toThrow(
      /append-only: UPDATE refused/,
    );
  });

  it('DELETE is refused', async () => {
    await expect(sql`DELETE FROM audit_log WHERE seq = 1`.execute(t.db)).rejects.toThrow(/append-only: DELETE refused/);
  });

  it('TRUNCATE is refused', async () => {
    await expect(sql`TRUNCATE audit_log`.execute(t.db)).rejects.toThrow(/append-only: TRUNCATE refused/);
  });

  it('the row is unchanged', async () => {
    const r = await sql<{ seq: string; event: unknown }>`SELECT seq, event FROM audit_log`.execute(t.db);
    expect(r.rows).toEqual([{ seq: '1', event: { type: 'run.started' } }]);
  });
});
