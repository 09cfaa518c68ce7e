import { canonicalJson, sha256Hex } from '@gatehouse/contracts';

/** `prev_hash` of the first event in the chain. */
export const GENESIS_HASH = '0'.repeat(64);

/**
 * Hash of one chain link: `sha256(prev_hash ‖ canonical JSON of the event)`, hex, where the
 * canonical JSON is RFC 8785 (JCS) and the event includes its sequence number.
 */
export function chainHash(prevHash: string, event: Record<string, unknown>): string {
  return sha256Hex(prevHash + canonicalJson(event));
}
