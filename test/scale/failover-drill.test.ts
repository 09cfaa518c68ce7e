import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync, appendFileSync as log } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, resolve } from 'node:path';
import { sql } from 'kysely';
import { describe, it } from 'vitest';
import { SERVICES, approveAsLead, call, startStack, tokenFor, type RunningStack } from '@gatehouse/cli';
import {
  createTestDatabase,
  delegationKeyEnv,
  freePort,
  startPrivatePostgres,
  startPrivateRedis,
  startPrivateStandby,
  TcpCut,
} from '@gatehouse/test-harness';
import { checkAuditChain, checkEffects, checkReconciliation, runStates, isSettled } from '../chaos/support/invariants.ts';
import type { ChaosStack } from '../chaos/support/chaos-stack.ts';
import { KINDS, KIND_CYCLE, type Run } from '../chaos/support/load.ts';

// Exploratory on-call drill (ADR 0775): two processes of every service over a private Postgres
// (behind a re-targetable TCP proxy, with a streaming standby) and a private Redis. Runs only
// with GH_DRILL=1. Writes its report to $GH_DRILL_OUT (default /tmp/failover-drill.log).

const OUT = process.env.GH_DRILL_OUT ?? '/tmp/failover-drill.log';
const say = (m: string): void => log(OUT, `${new Date().toISOString()} ${m}\n`);
const sleep = (ms: number): Promise<void> => new Promise((d) => setTimeout(d, ms));
const AUTH = 'local-auth-secret-change-me';
const REPLICATED = ['audit', 'policy-gateway', 'approval', 'executor', 'agent-loop', 'ops'];

const PG_BIN = '/usr/lib/postgresql/15/bin';
const pgAs = (tool: string, args: string[]): Promise<string> =>
  new Promise((res, rej) =>
    execFile('/usr/sbin/runuser', ['-u', 'postgres', '--', resolve(PG_BIN, tool), ...args], (err, out, errOut) =>
      err ? rej(new Error(`${tool}: ${String(err)} ${errOut}`)) : res(out),
    ),
  );

const REPS = [
  { user: 'rep-ana', tenant: 'quillfeather' },
  { user: 'rep-ben', tenant: 'quillfeather' },
  { user: 'rep-ivy', tenant: 'northwind' },
];
let nextOrder = 4000;

describe.runIf(process.env.GH_DRILL === '1')('on-call failover drill', () => {
  it('faults on two replicas', async () => {
    writeFileSync(OUT, '');
    const primary = await startPrivatePostgres();
    const redis = await startPrivateRedis();
    const proxy = new TcpCut(await freePort(), { host: '127.0.0.1', port: primary.port });
    await proxy.open();
    const server = `postgres://postgres@127.0.0.1:${proxy.port}`;
    const ledger = await createTestDatabase({ server });
    const staging = await createTestDatabase({ migrate: false });
    // Standby streams through a cut-able proxy (for the lagging promote).
    const repl = new TcpCut(await freePort(), { host: '127.0.0.1', port: primary.port });
    await repl.open();
    const sdir = resolve(primary.dir, 'standby');
    const sport = await freePort();
    // Each standby's folder is inside the primary's (its data stays where the drill's stops look).
    const makeStandby = async (fromPort: number, dir: string, port: number): Promise<void> => {
      await startPrivateStandby(primary, { fromPort, dataDir: dir, port, name: basename(dir) });
    };
    await makeStandby(repl.port, sdir, sport);
    say(`primary ${primary.port} standby ${sport} proxy ${proxy.port} redis ${redis.port}`);

    const env: Record<string, string> = {
      LOG_LEVEL: 'info',
      GATEHOUSE_ENV: 'test',
      AUDIT_ANCHOR_INTERVAL_MS: '500',
      RECONCILE_INTERVAL_MS: '0',
      GATEHOUSE_EXIT_WITH_PARENT: '1',
      DATABASE_URL: ledger.url,
      REDIS_URL: redis.url,
      QUEUE_PREFIX: 'gh124',
      AUDIT_SIGNING_KEY_PATH: resolve(mkdtempSync(resolve(tmpdir(), 'gh-audit-')), 'key.pem'),
      ...delegationKeyEnv(mkdtempSync(resolve(tmpdir(), 'gh-delegation-'))),
    };
    for (const svc of SERVICES) env[svc.portVar] = String(await freePort());
    env.STAGING_URL = `http://127.0.0.1:${env.STAGING_PORT}`;
    env.MODEL_BASE_URL = `http://127.0.0.1:${env.MODEL_STUB_PORT}/v1`;
    const dirA = mkdtempSync(resolve(tmpdir(), 'gh124-a-'));
    const dirB = mkdtempSync(resolve(tmpdir(), 'gh124-b-'));
    say(`logs A ${dirA} B ${dirB}`);
    const stacks: RunningStack[] = [];
    stacks.push(
      await startStack({
        env: { ...env, DATABASE_URL: staging.url, GATEHOUSE_EPOCH_DATABASE_URL: ledger.url },
        dir: dirA,
        readyTimeoutMs: 200_000,
        only: ['staging'],
      }),
    );
    const A = await startStack({
      env,
      dir: dirA,
      readyTimeoutMs: 200_000,
      only: SERVICES.map((x) => x.name).filter((n) => n !== 'staging'),
    });
    stacks.push(A);
    const envB = { ...env };
    for (const svc of SERVICES.filter((x) => REPLICATED.includes(x.name))) envB[svc.portVar] = String(await freePort());
    const B = await startStack({ env: envB, dir: dirB, readyTimeoutMs: 200_000, only: REPLICATED });
    stacks.push(B);
    const urlA = (svc: string): string => `http://127.0.0.1:${A.ports[svc]}`;
    const urlB = (svc: string): string => `http://127.0.0.1:${B.ports[svc]}`;
    const urls = [urlA, urlB];
    const s = {
      db: ledger.db,
      env,
      staging,
      url: (svc: string) => (svc === 'staging' ? env.STAGING_URL! : urlA(svc)),
    } as unknown as ChaosStack;
    say('stack up: two replicas');

    const plan = async (tag: string, n: number): Promise<Run[]> => {
      const runs: Run[] = [];
      for (let i = 0; i < n; i++) {
        const rep = REPS[i % REPS.length]!;
        const kind = KIND_CYCLE[i % KIND_CYCLE.length]!;
        const orderId = `O-${nextOrder++}`;
        await sql`insert into staging.orders (id, tenant, region, customer, paid_cents, status)
          values (${orderId}, ${rep.tenant}, 'US', 'cust-2', ${KINDS[kind].paidCents}, 'shipped')`.execute(staging.db);
        runs.push({ ticketId: `D-${tag}-${i}`, user: rep.user, kind, orderId, workflowId: null, lastError: null });
      }
      return runs;
    };
    const submit = async (runs: Run[]): Promise<void> => {
      await Promise.all(
        runs.map(async (run, i) => {
          await sleep(i * Number(process.env.GH_DRILL_SPACING ?? 300));
          const token = await tokenFor(run.user, AUTH);
          const body = { ticketId: run.ticketId, text: KINDS[run.kind].text(run.orderId), mode: 'act' };
          for (let k = 0; run.workflowId === null && k < 120; k++) {
            try {
              const r = await call('POST', `${urls[(i + k) % 2]!('agent-loop')}/v1/tickets`, token, body);
              if (r.status === 202) run.workflowId = String(r.body.workflowId);
              else run.lastError = `intake ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`;
            } catch (err) {
              run.lastError = String(err);
            }
            if (run.workflowId === null) await sleep(1000);
          }
        }),
      );
    };
    // Leads approve pending approvals of `runs`, alternating the approval replica.
    const approver = (runs: Run[]): { stop: () => Promise<void> } => {
      let running = true;
      let turn = 0;
      const decided = new Set<string>();
      const loop = (async () => {
        const tokens = { 'lead-eli': await tokenFor('lead-eli', AUTH), 'lead-jon': await tokenFor('lead-jon', AUTH) };
        while (running) {
          try {
            const ours = new Set(runs.map((r) => r.workflowId));
            const pending = await ledger.db
              .selectFrom('approvals')
              .innerJoin('workflows', 'workflows.id', 'approvals.workflow_id')
              .select(['approvals.id', 'approvals.workflow_id', 'workflows.tenant'])
              .where('approvals.status', '=', 'pending')
              .execute();
            for (const a of pending.filter((p) => ours.has(p.workflow_id) && !decided.has(p.id))) {
              const tok = a.tenant === 'northwind' ? tokens['lead-jon'] : tokens['lead-eli'];
              const d = await approveAsLead(urls[turn++ % 2]!('approval'), tok, a.id).catch(() => null);
              if (d?.status === 200) decided.add(a.id);
            }
          } catch {
            // mid-fault
          }
          await sleep(500);
        }
      })();
      return {
        stop: async () => {
          running = false;
          await loop;
        },
      };
    };
    const waitSettled = async (runs: Run[], ms: number): Promise<void> => {
      for (const until = Date.now() + ms; Date.now() < until; await sleep(1000)) {
        try {
          if ((await runStates(s, runs)).every(isSettled)) return;
        } catch {
          // ledger unreachable
        }
      }
    };
    const check = async (name: string, runs: Run[]): Promise<void> => {
      const states = await runStates(s, runs);
      const unsettled = states.filter((r) => !isSettled(r));
      const byState: Record<string, number> = {};
      for (const r of states)
        byState[`${r.state}${r.stopReason ? `/${r.stopReason}` : ''}`] =
          (byState[`${r.state}${r.stopReason ? `/${r.stopReason}` : ''}`] ?? 0) + 1;
      const eff = await checkEffects(s, runs);
      const chain = await checkAuditChain(s, Date.now() + 60_000).catch((e: unknown) => ({
        intact: false,
        reason: String(e),
        events: 0,
        backlog: -1,
      }));
      // Nothing unapproved executed: every succeeded action that required approval has an approval row decided approved/used.
      const ids = runs.flatMap((r) => (r.workflowId ? [r.workflowId] : []));
      const unapproved = ids.length
        ? await sql<{ id: string; tool: string }>`select a.id, a.tool from actions a
            where a.workflow_id = any(${ids}) and a.status = 'succeeded' and a.tool in ('issue_refund','reship_order')
              and not exists (select 1 from approvals p where p.action_id = a.id and p.status in ('approved','used'))
              and exists (select 1 from approvals p2 where p2.action_id = a.id)`.execute(ledger.db)
        : { rows: [] };
      const recon = await checkReconciliation(s, ids).catch((e: unknown) => ({
        unexplained: -1,
        open: [String(e)],
        classes: {},
        killedInDispatch: 0,
      }));
      say(
        `CHECK ${name}: states ${JSON.stringify(byState)} unsettled ${JSON.stringify(unsettled)}\n  effects dup ${JSON.stringify(eff.duplicates)} mismatch ${JSON.stringify(eff.mismatches)}\n  chain ${JSON.stringify(chain)}\n  unapproved-exec ${JSON.stringify(unapproved.rows)}\n  recon ${JSON.stringify(recon)}`,
      );
    };
    const phase = async (
      name: string,
      n: number,
      fault: (runs: Run[]) => Promise<void>,
      after?: (runs: Run[]) => Promise<void>,
    ): Promise<void> => {
      say(`PHASE ${name}`);
      const runs = await plan(name.replace(/\W+/g, ''), n);
      const ap = approver(runs);
      const sub = submit(runs);
      try {
        await sleep(Number(process.env.GH_DRILL_FAULT_AT ?? 4000));
        await fault(runs);
      } catch (err) {
        say(`fault error ${String(err)}`);
      }
      await sub;
      await waitSettled(runs, Number(process.env.GH_DRILL_SETTLE_MS ?? 150_000));
      await ap.stop();
      await waitSettled(runs, 30_000);
      await check(name, runs).catch((e: unknown) => say(`check error ${String(e)}`));
      if (after) await after(runs).catch((e: unknown) => say(`after error ${String(e)}`));
    };

    const kill9 = async (stack: RunningStack, svc: string): Promise<void> => {
      await stack.kill(svc, 'SIGKILL', { keepDown: false });
      say(`killed -9 ${svc}`);
    };
    const phases = (process.env.GH_DRILL_PHASES ?? 'base,exec,gw,appr,audit,loop,stop,redis,failover,lag,fuzz').split(',');
    const N = 8;
    if (phases.includes('base')) await phase('baseline', N, async () => {});
    const opRunning = async (): Promise<void> => {
      for (const until = Date.now() + 15_000; Date.now() < until; await sleep(20)) {
        const r = await ledger.db.selectFrom('operations').select('key').where('status', '=', 'running').executeTakeFirst();
        if (r) return say(`operation ${r.key} running`);
      }
    };
    if (phases.includes('exec'))
      await phase('kill9 executor A', N, async () => {
        await opRunning();
        await kill9(A, 'executor');
      });
    if (phases.includes('execB'))
      await phase('kill9 executor B', N, async () => {
        await opRunning();
        await kill9(B, 'executor');
      });
    if (phases.includes('gw')) await phase('kill9 policy-gateway B', N, () => kill9(B, 'policy-gateway'));
    if (phases.includes('appr'))
      await phase('kill9 approval A', N, async () => {
        await sleep(4000);
        await kill9(A, 'approval');
      });
    if (phases.includes('audit')) await phase('kill9 audit B', N, () => kill9(B, 'audit'));
    if (phases.includes('loop')) await phase('kill9 agent-loop A', N, () => kill9(A, 'agent-loop'));
    if (phases.includes('stop'))
      await phase('SIGSTOP executor B 40s', N, async () => {
        const pid = B.processes.get('executor')!.pid!;
        process.kill(pid, 'SIGSTOP');
        say(`SIGSTOP executor B pid ${pid}`);
        await sleep(40_000);
        try {
          process.kill(pid, 'SIGCONT');
          say('SIGCONT');
        } catch (e) {
          say(`SIGCONT failed ${String(e)} (supervisor replaced it?)`);
        }
      });
    if (phases.includes('redis'))
      await phase('redis restart empty', N, async () => {
        await sleep(3000);
        await redis.restart();
        say('redis restarted empty');
      });
    let curPrimaryDir = resolve(primary.dir, 'data');
    let standbyDir = sdir;
    let standbyPort = sport;
    let curPrimaryPort = primary.port;
    if (phases.includes('failover'))
      await phase('pg failover clean', N, async () => {
        await sleep(3000);
        await pgAs('pg_ctl', ['-D', curPrimaryDir, '-m', 'immediate', 'stop']);
        say('primary stopped immediate');
        await sleep(2000);
        await pgAs('pg_ctl', ['-D', standbyDir, '-w', 'promote']);
        proxy.retarget({ host: '127.0.0.1', port: standbyPort });
        say(`standby promoted, proxy -> ${standbyPort}`);
        curPrimaryDir = standbyDir;
        curPrimaryPort = standbyPort;
      });
    if (phases.includes('lag')) {
      // A new standby of the new primary, then its stream is cut while work goes on: an unclean promote.
      const repl2 = new TcpCut(await freePort(), { host: '127.0.0.1', port: curPrimaryPort });
      await repl2.open();
      const s2dir = resolve(primary.dir, 'standby2');
      const s2port = await freePort();
      await makeStandby(repl2.port, s2dir, s2port);
      say(`standby2 ${s2port} of ${curPrimaryPort}`);
      await phase(
        'pg unclean promote (lagging standby)',
        N,
        async () => {
          await repl2.cut();
          const lagMs = Number(process.env.GH_DRILL_LAG_MS ?? 6000);
          say(`standby2 stream cut; work continues on the primary for ${lagMs} ms`);
          await sleep(lagMs);
          await pgAs('pg_ctl', ['-D', curPrimaryDir, '-m', 'immediate', 'stop']);
          await pgAs('pg_ctl', ['-D', s2dir, '-w', 'promote']);
          proxy.retarget({ host: '127.0.0.1', port: s2port });
          say(`standby2 promoted (lagging), proxy -> ${s2port}`);
          curPrimaryDir = s2dir;
          standbyDir = s2dir;
          standbyPort = s2port;
        },
        async (runs) => {
          // The requesters retry the tickets the ledger forgot (intake is idempotent per ticket id).
          const lost = (await runStates(s, runs)).filter((r) => r.state === 'not_accepted').map((r) => r.ticketId);
          const again = runs.filter((r) => lost.includes(r.ticketId)).map((r) => ({ ...r, workflowId: null }));
          say(`resubmitting ${again.length} forgotten tickets`);
          const ap = approver(again);
          await submit(again);
          await waitSettled(again, 90_000);
          await ap.stop();
          await check('resubmitted after unclean promote', again);
        },
      );
    }
    if (phases.includes('fuzz')) {
      say('PHASE fuzz');
      // Same ticket on both intakes at once, 10 times.
      const runs = await plan('fuzz', 8);
      const token = await tokenFor('rep-ana', AUTH);
      const fuzzRuns = runs.map((r) => ({ ...r, user: 'rep-ana' }));
      for (const r of fuzzRuns) {
        await sql`update staging.orders set tenant = 'quillfeather' where id = ${r.orderId}`.execute(staging.db);
        const body = { ticketId: r.ticketId, text: KINDS[r.kind].text(r.orderId), mode: 'act' };
        const answers = await Promise.all([0, 1, 0, 1].map((k) => call('POST', `${urls[k]!('agent-loop')}/v1/tickets`, token, body)));
        const ids = new Set(answers.map((a) => String(a.body.workflowId)));
        say(`intake same key x4: ${answers.map((a) => a.status).join(',')} workflows ${ids.size}`);
        if (answers[0]!.status === 202) r.workflowId = String(answers[0]!.body.workflowId);
      }
      // Same approval decided concurrently on both approval replicas (approve+approve, approve+deny).
      const lead = await tokenFor('lead-eli', AUTH);
      const decidedOnce = new Set<string>();
      for (let round = 0; round < 60; round++) {
        const ids = fuzzRuns.flatMap((r) => (r.workflowId ? [r.workflowId] : []));
        const pending = await ledger.db
          .selectFrom('approvals')
          .select(['id'])
          .where('status', '=', 'pending')
          .where('workflow_id', 'in', ids)
          .execute();
        for (const p of pending.filter((x) => !decidedOnce.has(x.id))) {
          decidedOnce.add(p.id);
          const shown = await call('GET', `${urlA('approval')}/v1/approvals/${p.id}`, lead);
          const mk = (decision: string) => ({
            decision,
            actionVersion: shown.body.actionVersion,
            actionDigest: shown.body.actionDigest,
            reason: 'fuzz',
          });
          const mix = decidedOnce.size % 2 ? ['approve', 'approve'] : ['approve', 'deny'];
          const res = await Promise.all(
            mix.map((d, k) => call('POST', `${urls[k]!('approval')}/v1/approvals/${p.id}/decision`, lead, mk(d))),
          );
          say(`approval ${p.id} ${mix.join('+')}: ${res.map((x) => `${x.status} ${JSON.stringify(x.body).slice(0, 120)}`).join(' | ')}`);
        }
        if ((await runStates(s, fuzzRuns)).every(isSettled) && round > 5) break;
        await sleep(1000);
      }
      await waitSettled(fuzzRuns, 60_000);
      await check('fuzz', fuzzRuns);
    }
    say('DONE');
    for (const st of stacks.reverse()) await st.stop(5000);
    await redis.stop();
    await staging.drop().catch(() => undefined);
    for (const d of [curPrimaryDir, sdir, resolve(primary.dir, 'standby2')])
      await pgAs('pg_ctl', ['-D', d, '-m', 'immediate', 'stop']).catch(() => undefined);
    await primary.destroy();
  }, 3_600_000);
});
