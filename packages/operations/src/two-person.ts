import { loadReleaseManifest, PolicyDenied, testFaults, type ReleaseManifest } from '@gatehouse/contracts';
import type { Db, Trx } from '@gatehouse/ledger';
import { loadBundle, type PolicyBundle } from '@gatehouse/policy';
import { consumeOverride, overrideDigest, overrideRefusal, requestOverride, type OverrideKind, type OverrideTicket } from './overrides.ts';

const PACKS = ['support', 'change'] as const;

/**
 * The limits of `next` that are looser than those of `active` (docs/decisions/0230-two-person-release-changes.md),
 * as `<pack>.<limit>: <old> → <new>` lines: a numeric limit that grew or disappeared (every
 * bundle limit is a ceiling: larger is looser), an approval lifetime that grew, an approver no
 * longer required to be in the requester's region, a list of allowed environments that gained
 * one, a rule dropped from the rule order. A limit the active
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
  // An approver of any region: more people may approve (docs/product/policy-rules.md#approvals).
  if (a.approval.sameRegion && !b.approval.sameRegion) out.push(`${pack}.approval.sameRegion: true → false`);
  for (const rule of a.ruleOrder) if (!(b.ruleOrder as readonly string[]).includes(rule)) out.push(`${pack}.ruleOrder: ${rule} dropped`);
  return out;
}

/** One thing an activation needs a second person for, and what exactly (bound into the override). */
export interface TwoPersonNeed {
  kind: Extract<OverrideKind, 'force_gate' | 'raise_limits'>;
  items: string[];
}

/** A need no usable override covered, and why ({@link overrideRefusal}: none, pending, denied, expired, used, digest_mismatch). */
export type UnmetNeed = TwoPersonNeed & { why: string };

const FLAG = { force_gate: 'force', raise_limits: 'raise-limits' } as const;

/** An activation that needs a second person's approved override; `needs` says for what and why none applied. */
export class TwoPersonRequired extends PolicyDenied {
  readonly needs: UnmetNeed[];
  constructor(release: string, needs: UnmetNeed[]) {
    super(
      'two_person',
      `release ${release} needs a second person (a policy owner or another operator) for: ` +
        needs.map((n) => `${n.kind} (${n.items.join('; ')}; override: ${n.why})`).join(', ') +
        `. Ask with: gatehouse release override ${release} --for ${needs.map((n) => FLAG[n.kind]).join('|')} --reason "<why>"; ` +
        'they approve it in the approval inbox or with POST /v1/approvals/<approval>/decision',
    );
    this.needs = needs;
  }
}

/**
 * `GATEHOUSE_TEST_SKIP_TWO_PERSON=1` ({@link testFaults}) removes the second person from
 * activation (a needed override is neither looked for nor consumed), so a test shows the
 * requirement matters (docs/decisions/0016-test-only-hooks.md).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function twoPersonSkipped(): boolean {
  return testFaults().skipTwoPerson;
}

const summaryOf = (n: TwoPersonNeed): string => `${n.kind}:${n.items.length}`;

/**
 * Asks for the override of an activation need (`gatehouse release override <id> --for force|raise-limits`):
 * an approval of the approval service bound to the release's manifest and exactly what it covers
 * — the failing boundary cases, or the raised limits (see `requestOverride`).
 * @returns the approval to decide.
 * @throws Error when there is nothing of that kind to override, or the reason is malformed.
 */
export async function requestActivationOverride(
  db: Db,
  release: string,
  need: TwoPersonNeed,
  opts: { operator: string; hmacKey: string; reason: string },
): Promise<OverrideTicket> {
  if (!need.items.length) throw new Error(`release ${release}: nothing to override for ${need.kind}`);
  const manifest = loadReleaseManifest(release);
  return requestOverride(db, {
    release,
    kind: need.kind,
    items: need.items,
    manifest,
    digest: overrideDigest(need.kind, release, need.items, manifest),
    summary: summaryOf(need),
    ...opts,
  });
}

/**
 * Consumes, in the activation's transaction, one approved override per need, bound to `manifest`
 * and the need's items.
 * @throws TwoPersonRequired naming the needs no approved override covers and why (nothing is
 * consumed then: the transaction rolls back).
 */
export async function requireSecondPerson(
  trx: Trx,
  release: string,
  needs: TwoPersonNeed[],
  opts: { operator: string; hmacKey: string; manifest: ReleaseManifest },
): Promise<void> {
  if (twoPersonSkipped()) return;
  const missing: UnmetNeed[] = [];
  for (const n of needs) {
    const digest = overrideDigest(n.kind, release, n.items, opts.manifest);
    const used = await consumeOverride(trx, { release, kind: n.kind, digest, summary: summaryOf(n), ...opts });
    if (!used) missing.push({ ...n, why: await overrideRefusal(trx, release, n.kind, digest) });
  }
  if (missing.length) throw new TwoPersonRequired(release, missing);
}
