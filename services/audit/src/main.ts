import { createPublicKey } from 'node:crypto';
import { hostname } from 'node:os';
import {
  assertReleaseMatchesCode,
  createServiceContext,
  createHttpApp,
  finishApp,
  listen,
  closeServer,
  installShutdown,
  logThrottle,
  needsOperator,
} from '@gatehouse/platform';
import { observeAuditBacklog } from '@gatehouse/telemetry';
import { chainPending, readAuditBacklog } from './jobs/chain.writer.ts';
import { anchorHead, anchorKeyRefusal, HandoverCache, loadSigningKey, type AnchorKeyRefusal } from './domain/anchor.ts';
import { anchorFreshnessLimitMs, defaultWitnessPath } from '@gatehouse/ledger';
import { auditLossReadyCheck } from './domain/audit-loss-ready.ts';
import { auditEnvShape, auditProductionProblems } from './settings.ts';
import { claimMonitorPass } from './domain/monitor-pass.ts';
import { evaluateMonitors, raiseAlerts } from './domain/monitors.ts';

const ctx = createServiceContext('audit', auditEnvShape, process.env, (e) => auditProductionProblems(e, process.env));
const { env, log, db } = ctx;
// The code must be the release it serves: a differing catalog, prompt or audit schema refuses to boot (ADR 0220).
await assertReleaseMatchesCode(ctx.name, env.GATEHOUSE_RELEASE, db, log);
const key = loadSigningKey(env.AUDIT_SIGNING_KEY_PATH, env.GATEHOUSE_ENV !== 'production');
// Every anchor is also appended here, outside Postgres, for `audit verify` (ADR 0570).
const witness = env.AUDIT_ANCHOR_WITNESS_PATH ?? defaultWitnessPath(env.AUDIT_SIGNING_KEY_PATH);
// The chain and anchor timers fail on every tick while Postgres is down: one line per 30 s each,
// with how many were left out.
const chainFailures = logThrottle();
const anchorFailures = logThrottle();
// The key guard (ADR 0717): while the newest anchor's key never handed over to this replica's,
// nothing is anchored, events are still chained, readiness fails with why and the log says it
// once per 30 s with both fingerprints and the command that fixes it.
let keyRefusal: AnchorKeyRefusal | null = null;
const keyRefusals = logThrottle();
const onRefused = (r: AnchorKeyRefusal | null): void => {
  keyRefusal = r;
  if (r)
    keyRefusals(r.message, (repeated) =>
      log.error({ newestAnchorKey: r.newestKey, ownKey: r.ownKey, newestSeq: r.newestSeq, repeated }, r.message),
    );
};
// Judged at boot too, so a replica of the wrong key is not ready from its first readiness probe.
const handovers = new HandoverCache();
const judgedAtBoot = anchorKeyRefusal(db, key, { handovers })
  .then(onRefused)
  .catch((err: unknown) => log.error({ err: (err as Error).message }, 'anchor key check failed'));
// Only an operator clears it (the first key, a rotation, or a fresh database): `stack up` stops waiting (ADR 0729).
ctx.readyChecks.anchorKey = needsOperator(async () => {
  await judgedAtBoot;
  if (keyRefusal) throw new Error(keyRefusal.message);
});
// A lost audit tail holds consequential steps until an operator acknowledges it (ADR 0795).
ctx.readyChecks.auditLoss = auditLossReadyCheck(db);
const anchor = (): void => {
  anchorHead(db, key, witness, { handovers, onRefused }).catch((err: unknown) => {
    const message = (err as Error).message;
    anchorFailures(message, (repeated) => log.error({ err: message, repeated }, 'anchoring failed'));
  });
};
observeAuditBacklog(() => readAuditBacklog(db));

let running: Promise<unknown> | undefined;
const tick = (): void => {
  if (running) return;
  running = (async () => {
    let n: number;
    do {
      n = await chainPending(db);
      // Which replica chained what (several audit processes take turns under the chain lock, ADR 0195).
      if (n > 0) log.debug({ events: n }, 'audit events chained');
    } while (n > 0);
  })()
    .catch((err: unknown) => {
      const message = (err as Error).message;
      chainFailures(message, (repeated) => log.error({ err: message, repeated }, 'chaining failed'));
    })
    .finally(() => {
      running = undefined;
    });
};
const chainTimer = setInterval(tick, env.AUDIT_CHAIN_INTERVAL_MS);
const anchorTimer = setInterval(anchor, env.AUDIT_ANCHOR_INTERVAL_MS);

let monitoring = false;
// One pass per interval across the audit replicas, whichever claims it (ADR 0400).
const replica = `${hostname()}:${process.pid}`;
const monitorTimer = setInterval(() => {
  if (monitoring) return;
  monitoring = true;
  claimMonitorPass(db, replica, env.MONITOR_INTERVAL_MS)
    .then(async (mine) => {
      if (!mine) return;
      const alerts = await evaluateMonitors(db, {
        autoApproveLimitCents: env.MONITOR_AUTO_APPROVE_LIMIT_CENTS,
        maxFailedUnknownPerHour: env.MONITOR_MAX_FAILED_UNKNOWN_PER_HOUR,
        trustedPublicKey: createPublicKey(key),
        ...(keyRefusal ? { anchorKeyRefused: `${replica}: ${keyRefusal.message}` } : {}),
        witnessPath: witness,
        maxUnanchoredAgeMs: anchorFreshnessLimitMs(env.AUDIT_ANCHOR_INTERVAL_MS, env.AUDIT_ANCHOR_SLACK_MS),
      });
      await raiseAlerts(alerts, log, env.ALERT_WEBHOOK_URL);
    })
    .catch((err: unknown) => log.error({ err: (err as Error).message }, 'monitors failed'))
    .finally(() => {
      monitoring = false;
    });
}, env.MONITOR_INTERVAL_MS);

const app = finishApp(createHttpApp('audit', ctx.readyChecks), log);
const { server, port } = await listen(app, env.AUDIT_PORT);
log.info({ port, witness }, 'audit ready');
installShutdown(log, [
  () => ctx.close(),
  async () => {
    await running;
    await anchorHead(db, key, witness, { handovers, onRefused }); // leave the head anchored on a clean stop
  },
  () => {
    clearInterval(chainTimer);
    clearInterval(anchorTimer);
    clearInterval(monitorTimer);
  },
  () => closeServer(server),
]);
