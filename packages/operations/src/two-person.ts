import { PolicyDenied, type ReleaseManifest } from '@gatehouse/contracts';
import type { Db, Trx } from '@gatehouse/ledger';
import { loadBundle, type PolicyBundle } from '@gatehouse/policy';
import { consumeOverride, overrideDigest, requestOverride, type OverrideKind } from './overrides.ts';

const PACKS = ['support', 'change'] as const;

/**
 * The limits of `next` that are looser than those of `active` (docs/decisions/0230-two-person-release-changes.md),
 * as `<pack>.<limit>: <old> → <new>` lines: a numeric limit that grew or disappeared (every
 * bundle limit is a ceiling: larger is looser), an approval lifetime that grew, a list of
 * allowed environments that gained one, a rule dropped from the rule order. A limit the active
 * bundle did not have is a new restriction, not a raise. Empty when nothing is looser, or when
 * there is no active release.
 */
export function raisedLimits(active: ReleaseManifest | null, next: ReleaseManifest): string[] {
  if (!active) return [];
  return PACKS.flatMap((pack) => {
    const dir = process.env.POLICY_DIR;
    return looser(pack, loadBundle(active.policy[pack], dir), loadBundle(next.policy[pack], dir));
  });
}

/** The ways bundle `b` is looser than bundle `a` (see {@link raisedLimits}). */
function looser(pack: string, a: PolicyBundle, b: PolicyBundle): string[] {
  const out: string[] = [];
  const la = a.limits as Record<string, unknown>;
  const lb = b.limits as Record<string, unknown>;
  for (const [k, v] of Object.entries(la)) {
    const w = lb[k];
    if (typeof v === 'number' && (typeof w !== 'number' || w > v)) out.push(`${pack}.limits.${k}: ${v} → ${String(w ?? 'none')}`);
    if (Array.isArray(v) && (!Array.isArray(w) || w.some((x) => !v.includes(x))))
      out.push(`${pack}.limits.${k}: ${JSON.stringify(v)} → ${JSON.stringify(w ?? null)}`);
  }
  if (b.approval.ttlSeconds > a.approval.ttlSeconds)
    out.push(`${pack}.approval.ttlSeconds: ${a.approval.ttlSeconds} → ${b.approval.ttlSeconds}`);
  for (const rule of a.ruleOrder) if (!(b.ruleOrder as readonly string[]).includes(rule)) out.push(`${pack}.ruleOrder: ${rule} dropped`);
  return out;
}

/** One thing an activation needs a second person for, and what exactly (bound into the override). */
export interface TwoPersonNeed {
  kind: Extract<OverrideKind, 'force_gate' | 'raise_limits'>;
  items: string[];
}

/** An activation that needs a second operator's approved override; `needs` says for what. */
export class TwoPersonRequired extends PolicyDenied {
  readonly needs: TwoPersonNeed[];
  constructor(release: string, needs: TwoPersonNeed[]) {
    super(
      'two_person',
      `release ${release} needs a second operator for: ` +
        needs.map((n) => `${n.kind} (${n.items.join('; ')})`).join(', ') +
        `. Ask with: gatehouse release override ${release} --for ${needs.map((n) => (n.kind === 'force_gate' ? 'force' : 'raise-limits')).join('|')} --reason "<why>"; another operator approves it with --approve <override>`,
    );
    this.needs = needs;
  }
}

/**
 * Asks for the override of an activation need (`gatehouse release override <id> --for force|raise-limits`),
 * bound to exactly what it covers: the failing boundary cases, or the raised limits.
 * @returns the override id.
 * @throws Error when there is nothing of that kind to override.
 */
export async function requestActivationOverride(
  db: Db,
  release: string,
  need: TwoPersonNeed,
  opts: { operator: string; hmacKey: string; reason: string },
): Promise<string> {
  if (!need.items.length) throw new Error(`release ${release}: nothing to override for ${need.kind}`);
  return requestOverride(db, {
    release,
    kind: need.kind,
    digest: overrideDigest(need.kind, release, need.items),
    summary: `${need.kind}:${need.items.length}`,
    ...opts,
  });
}

/**
 * Consumes, in the activation's transaction, one approved override per need.
 * @throws TwoPersonRequired naming the needs no approved override covers (nothing is consumed then:
 * the transaction rolls back).
 */
export async function requireSecondPerson(
  trx: Trx,
  release: string,
  needs: TwoPersonNeed[],
  opts: { operator: string; hmacKey: string },
): Promise<void> {
  const missing: TwoPersonNeed[] = [];
  for (const n of needs) {
    const used = await consumeOverride(trx, {
      release,
      kind: n.kind,
      digest: overrideDigest(n.kind, release, n.items),
      summary: `${n.kind}:${n.items.length}`,
      ...opts,
    });
    if (!used) missing.push(n);
  }
  if (missing.length) throw new TwoPersonRequired(release, missing);
}
