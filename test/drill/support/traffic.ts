import { createHash } from 'node:crypto';

/** mulberry32: a small deterministic PRNG (the drill's only source of randomness). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A deterministic number in [0, 1) for one decision named by `key` (same seed and key, same value). */
export const draw = (seed: number, key: string): number => createHash('sha256').update(`${seed}:${key}`).digest().readUInt32BE(0) / 2 ** 32;

/** A rep of the synthetic world who may refund, with the lead who decides their approvals (same tenant and region, limit 500.00). */
export interface Rep {
  user: string;
  tenant: string;
  region: string;
  lead: string;
  /** Order id prefix the model-stub reads (`O-1234`, `N-1234`). */
  orderPrefix: 'O' | 'N';
}

/** Every rep of synthetic-world/world.json with `refund:create`, across both tenants and both of quillfeather's regions. */
export const REPS: readonly Rep[] = [
  { user: 'rep-ana', tenant: 'quillfeather', region: 'US', lead: 'lead-eli', orderPrefix: 'O' },
  { user: 'rep-ben', tenant: 'quillfeather', region: 'US', lead: 'lead-eli', orderPrefix: 'O' },
  { user: 'rep-eva', tenant: 'quillfeather', region: 'EU', lead: 'lead-dee', orderPrefix: 'O' },
  { user: 'rep-ivy', tenant: 'northwind', region: 'US', lead: 'lead-jon', orderPrefix: 'N' },
];

/** One ticket of the stream: who asks, on which (new) order, for what; amounts in integer cents. */
export interface Ticket {
  index: number;
  ticketId: string;
  rep: Rep;
  orderId: string;
  /** Drill second the ticket arrives. */
  arrivesAt: number;
  /** Refund asked (null: a reship-only ticket). */
  amountCents: number | null;
  paidCents: number;
  reship: boolean;
}

/**
 * Refund amounts as support sees them: 70 % up to 40.00 (under the auto limit of 50.00), 20 %
 * 50.01–150.00, 3 % 150.01–500.00, 7 % 500.01–900.00 (above the maximum of 500.00 and the
 * delegation ceiling of 500.00 — policy denies them unless a bundle is wrong, and then the payments
 * ledger's ceiling does). A rep's ~30 tickets in three hours then come near their 1,000.00 a day (R5).
 */
function refundCents(r: number, rand: () => number): number {
  if (r < 0.7) return 500 + Math.floor(rand() * 3501);
  if (r < 0.9) return 5001 + Math.floor(rand() * 10000);
  if (r < 0.93) return 15001 + Math.floor(rand() * 35000);
  return 50001 + Math.floor(rand() * 40000);
}

/**
 * The ticket stream: `n` tickets, ticket i arriving at i × `everyS` seconds, from the reps in turn
 * with a random skip; 65 % refund only, 25 % refund and replacement, 10 % replacement only. Paid
 * covers the refund (R4); an order with a replacement is paid at most 500.00 so its lead's limit
 * covers the reship approval above 300.00 (R9).
 */
export function ticketStream(opts: { seed: number; n: number; everyS: number; tag: string; firstOrder: number }): Ticket[] {
  const rand = prng(opts.seed);
  return Array.from({ length: opts.n }, (_, i) => {
    const rep = REPS[(i + Math.floor(rand() * 2)) % REPS.length]!;
    const kind = rand();
    const amountCents = kind < 0.9 ? refundCents(rand(), rand) : null;
    const reship = kind >= 0.65 && (amountCents ?? 0) <= 45_000;
    const paidCents = reship
      ? Math.min((amountCents ?? 1000) + 1000 + Math.floor(rand() * 20_000), 50_000)
      : (amountCents ?? 0) + 1000 + Math.floor(rand() * 10_000);
    return {
      index: i,
      ticketId: `${opts.tag}-${i + 1}`,
      rep,
      orderId: `${rep.orderPrefix}-${opts.firstOrder + i}`,
      arrivesAt: i * opts.everyS,
      amountCents,
      paidCents,
      reship,
    };
  });
}

/** The ticket's text, as a rep writes it (read by the obedient model-stub). */
export function ticketText(t: Ticket): string {
  if (t.amountCents === null) return `Customer on order ${t.orderId} reports a lost parcel. Please ship a replacement.`;
  const refund = `Please refund ${(t.amountCents / 100).toFixed(2)} dollars`;
  return `Customer on order ${t.orderId} reports a damaged item. ${refund}${t.reship ? ' and ship a replacement' : ''}.`;
}
