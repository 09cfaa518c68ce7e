import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import type { KeyObject } from 'node:crypto';
import { anchorFreshnessLimitMs, readWitness, verifyAuditChain, type ChainVerification, type Db } from '@gatehouse/ledger';
import { auditAnchorFromEnv } from '@gatehouse/platform';
import { stateRoot } from './stack.ts';
import { UsageError } from './commands.ts';

/**
 * The anchor witness of the local stack when `AUDIT_ANCHOR_WITNESS_PATH` is unset:
 * `<state folder>/audit-anchors.jsonl` (GATEHOUSE_STATE_DIR, default `.gatehouse/`), where the
 * stack's audit service writes it (beside its signing key).
 */
export function localWitnessPath(env: Record<string, string | undefined> = process.env): string {
  return env.AUDIT_ANCHOR_WITNESS_PATH ?? resolve(stateRoot(env), 'audit-anchors.jsonl');
}

/**
 * Which witness `audit verify` reads: `flag` (`--witness <file>`), else `AUDIT_ANCHOR_WITNESS_PATH`
 * (a named witness must exist: its absence fails verification), else the local stack's default
 * when it exists.
 * Returns null when none was named and the default does not exist (verification without one).
 * @throws UsageError when the named witness is a directory, not a file (exit 2, before the database is read).
 */
export function witnessToRead(flag: string | undefined, env: Record<string, string | undefined> = process.env): string | null {
  const named = flag ?? env.AUDIT_ANCHOR_WITNESS_PATH;
  if (named) {
    const path = resolve(named);
    if (statSync(path, { throwIfNoEntry: false })?.isDirectory()) {
      const from = flag === undefined ? 'AUDIT_ANCHOR_WITNESS_PATH' : '--witness';
      throw new UsageError(`audit verify: ${from} ${path} is a directory; it names the witness file (audit-anchors.jsonl); nothing ran`);
    }
    return path;
  }
  const local = localWitnessPath(env);
  return existsSync(local) ? local : null;
}

/**
 * `gatehouse audit verify`: walks the chain and its anchors against the pinned key, checks every
 * anchor of the witness `opts.witness` (the path {@link witnessToRead} resolved from `--witness
 * <file>`, `AUDIT_ANCHOR_WITNESS_PATH` or the local stack's; null: none) and
 * that no event has waited longer than the anchoring interval plus slack
 * (`AUDIT_ANCHOR_INTERVAL_MS` + `AUDIT_ANCHOR_SLACK_MS`) for an anchor
 * (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md). Prints one line, or the
 * {@link ChainVerification} with the witness path as JSON. Returns the exit code: 0 intact, 1 not.
 * @throws Error when a named witness does not exist or has a malformed line (exit 1), or the
 * settings are invalid; the database's errors (exit 4 when unreachable).
 */
export async function auditVerifyCommand(
  db: Db,
  opts: { witness: string | null; json?: boolean; trustedPublicKey?: KeyObject; out: (line: string) => void },
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  const settings = auditAnchorFromEnv(env);
  const path = opts.witness;
  // Lines a crash cut short while the audit service appended them: skipped, and named (ADR 0662).
  const torn: number[] = [];
  const r = await verifyAuditChain(db, {
    ...(opts.trustedPublicKey ? { trustedPublicKey: opts.trustedPublicKey } : {}),
    ...(path ? { witness: readWitness(path, (line) => torn.push(line)) } : {}),
    maxUnanchoredAgeMs: anchorFreshnessLimitMs(settings.intervalMs, settings.slackMs),
  });
  if (opts.json) opts.out(JSON.stringify({ ...r, witness: path, ...(torn.length ? { tornWitnessLines: torn } : {}) }, null, 2));
  else {
    opts.out(summary(r, path));
    if (torn.length) opts.out(`  witness line(s) ${torn.join(', ')} torn (a write cut short by a crash): skipped`);
  }
  return r.intact ? 0 : 1;
}

/** The one-line answer of {@link auditVerifyCommand}. */
function summary(r: ChainVerification, witness: string | null): string {
  if (!r.intact) return `BROKEN at seq ${r.firstBadSeq}: ${r.reason}`;
  const key = r.anchorsTrusted ? 'pinned key' : 'keys stored with them';
  const seen = witness ? `${r.witnessChecked} witnessed in ${witness}` : 'no anchor witness';
  const lost = r.keyRotationsByOverride ? `, ${r.keyRotationsByOverride} from a lost key by two-person override` : '';
  const rotations = r.keyRotations ? `, ${r.keyRotations} key rotation(s)${lost}` : '';
  return `intact ${r.events} events, head ${r.headHash}, ${r.anchorsChecked} anchor(s) (${key}${rotations}), ${seen}`;
}
