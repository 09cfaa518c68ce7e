import { judgeReplication, readLedgerReplication, type Db, type LedgerReplication, type ReplicationVerdict } from '@gatehouse/ledger';

/**
 * `gatehouse ledger replication`: reads the ledger's replication from Postgres's own views and
 * judges it against docs/decisions/0775 (a promote must lose nothing the services acknowledged).
 * Prints the settings, each standby and the verdict (`json`: one document `{…replication,
 * verdict}`). No token: it reads Postgres's settings, nothing of the ledger's records.
 * Returns the exit code: 0 when synchronous or when no standby streams (nothing to promote),
 * else 1 (asynchronous, waiting for a missing synchronous standby, a standby's URL, or not visible
 * to this role).
 * @throws the driver's error when Postgres is unreachable (the CLI's exit 4).
 */
export async function ledgerReplicationCommand(db: Db, opts: { json?: boolean; out: (line: string) => void }): Promise<number> {
  const replication = await readLedgerReplication(db);
  const verdict = judgeReplication(replication);
  if (opts.json) opts.out(JSON.stringify({ ...replication, verdict }, null, 2));
  else for (const line of replicationLines(replication, verdict)) opts.out(line);
  return verdict.kind === 'synchronous' || verdict.kind === 'no_standby' ? 0 : 1;
}

/** The lines `ledger replication` prints: the settings, one line per standby, then the verdict. */
function replicationLines(r: LedgerReplication, verdict: ReplicationVerdict): string[] {
  return [
    `synchronous_commit ${r.synchronousCommit}; synchronous_standby_names "${r.synchronousStandbyNames}"${r.inRecovery ? '; in recovery' : ''}`,
    ...r.standbys.map(
      (s) =>
        `  standby ${s.name}: ${s.state ?? 'state not visible'}, ${s.syncState ?? 'sync state not visible'}${
          s.replayLagMs === null ? '' : `, replay ${s.replayLagMs} ms behind`
        }`,
    ),
    `${verdict.kind}: ${verdict.why}`,
  ];
}
