import { canonicalJson, sha256Hex } from '@gatehouse/contracts';

/** `prev_hash` of the first event in the chain. */
export const GENESIS_HASH = '0'.repeat(64);

/**
 * Keys the chain adds to an event before hashing it, which the event itself may not carry: a
 * payload `seq` would replace the link's own sequence number in the hashed object, so the hash
 * would no longer bind it and a stored event could gain `"seq": <its seq>` without changing its
 * hash (docs/decisions/0684-audit-chain-reserved-keys-and-jsonb.md).
 */
export const RESERVED_CHAIN_KEYS: readonly string[] = ['seq'];

/** The first key of {@link RESERVED_CHAIN_KEYS} that `event` carries as its own; null when none. */
export function reservedChainKey(event: Record<string, unknown>): string | null {
  return RESERVED_CHAIN_KEYS.find((k) => Object.hasOwn(event, k)) ?? null;
}

/**
 * Hash of one chain link: `sha256(prev_hash ‖ canonical JSON of {seq, ...event})`, hex, where the
 * canonical JSON is RFC 8785 (JCS) and `seq` is the link's sequence number (1-based).
 * @throws Error when `event` carries a reserved key ({@link reservedChainKey}), or a value JCS
 *   cannot represent (a non-finite number).
 */
export function chainHash(prevHash: string, seq: number, event: Record<string, unknown>): string {
  const reserved = reservedChainKey(event);
  if (reserved !== null)
    throw new Error(`audit event at seq ${seq} carries the reserved chain key "${reserved}": refused, it would replace the link's own`);
  return sha256Hex(prevHash + canonicalJson({ seq, ...event }));
}
