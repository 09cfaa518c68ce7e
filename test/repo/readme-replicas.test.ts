import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';

// README, "Operating it": second replicas of a running stack share its database and queue prefix.
// A state folder creates its own audit signing key and delegation key pair, so a replica started
// like a second stack (its own state folder) signed anchors the first stack's key does not verify
// (`audit verify`: BROKEN) and minted delegated tokens staging refused (every effect of its
// executor "not carried out"). The README's replica command must hand the replica the first
// stack's key material, start no second staging or model-stub, and use ports a service can bind
// (below Linux's ephemeral range, where an outgoing connection may hold the port).

/** Variables naming the key material and witness a state folder would otherwise create for itself. */
const SHARED = [
  'AUDIT_SIGNING_KEY_PATH',
  'AUDIT_ANCHOR_WITNESS_PATH',
  'GATEHOUSE_DELEGATION_SIGNING_KEY_PATH',
  'GATEHOUSE_DELEGATION_JWKS_PATH',
];
const REPLICATED = ['audit', 'policy-gateway', 'approval', 'executor', 'agent-loop', 'ops'];
const EPHEMERAL_FROM = 32_768;

/** The first `sh` block after the README's paragraph on second replicas. */
function replicaCommand(): string {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  const at = readme.indexOf('Second replicas of a running stack');
  expect(at, 'README explains how to start second replicas').toBeGreaterThan(-1);
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  expect(block, 'README gives the replica command').not.toBeNull();
  return block![1]!;
}

describe("README's second-replica command", () => {
  it("shares the first stack's key material and starts every replicated service, and only those", () => {
    const cmd = replicaCommand();
    for (const v of SHARED) expect(cmd, v).toMatch(new RegExp(`\\b${v}=`));
    const only = /--only\s+(\S+)/.exec(cmd);
    expect(only?.[1]?.split(',').sort()).toEqual([...REPLICATED].sort());
    expect(cmd).toMatch(/\bGATEHOUSE_STATE_DIR=/);
  });

  it('names ports below the ephemeral range', () => {
    const ports = [...replicaCommand().matchAll(/_PORT=(\d+)/g)].map((m) => Number(m[1]));
    expect(ports.length).toBe(REPLICATED.length);
    for (const p of ports) expect(p).toBeLessThan(EPHEMERAL_FROM);
  });
});
