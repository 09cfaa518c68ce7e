import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';

/** A test file's own releases and policy folders (`RELEASES_DIR`, `POLICY_DIR`), see {@link useReleaseDirs}. */
export interface ReleaseDirs {
  releasesDir: string;
  policyDir: string;
  /** Writes release `id`: rel-1's manifest with `id` set, then changed by `change`. */
  writeRelease: (id: string, change?: (m: Record<string, unknown>) => void) => void;
  /** Puts the former `RELEASES_DIR` and `POLICY_DIR` back (unset when they were). */
  restore: () => void;
}

/**
 * Creates a releases folder and a policy folder holding the shipped bundles (support-p1,
 * change-c1), and points `RELEASES_DIR` and `POLICY_DIR` of this process at them, so a test can
 * activate, roll back and requeue releases of its own making without touching `releases/`.
 */
export function useReleaseDirs(): ReleaseDirs {
  const saved = { RELEASES_DIR: process.env.RELEASES_DIR, POLICY_DIR: process.env.POLICY_DIR };
  const releasesDir = mkdtempSync(resolve(tmpdir(), 'gh-releases-'));
  const policyDir = mkdtempSync(resolve(tmpdir(), 'gh-policy-'));
  for (const f of ['support-p1.json', 'change-c1.json']) copyFileSync(resolve(repoRoot, 'policy', f), resolve(policyDir, f));
  Object.assign(process.env, { RELEASES_DIR: releasesDir, POLICY_DIR: policyDir });
  return {
    releasesDir,
    policyDir,
    writeRelease: (id, change = () => {}) => {
      const m = JSON.parse(readFileSync(resolve(repoRoot, 'releases/rel-1.json'), 'utf8')) as Record<string, unknown>;
      m.id = id;
      change(m);
      writeFileSync(resolve(releasesDir, `${id}.json`), JSON.stringify(m));
    },
    restore: () => {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    },
  };
}
