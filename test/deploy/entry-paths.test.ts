import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';

// Every file the image, compose and the Kubernetes manifests start (`node <path>`, the telemetry
// preload under /app) exists in the repository: a moved entry (docs/decisions/0330-layout.md)
// fails here, offline, not at the first deployment.

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : /\.(ya?ml)$|Dockerfile$/.test(name) ? [path] : [];
  });
}

/** The repository paths `text` starts: `"node", "<path>.ts"`, `node <path>.ts`, `/app/<path>.ts`. */
function entries(text: string): string[] {
  const found = [
    ...text.matchAll(/"node",\s*"([\w./-]+\.ts)"/g),
    ...text.matchAll(/(?:^|[\s`(])node\s+([\w./-]+\.ts)/gm),
    ...text.matchAll(/\/app\/([\w./-]+\.ts)/g),
  ];
  return found.map((m) => m[1]!);
}

describe('deploy/ starts files that exist', () => {
  const all = files(resolve(repoRoot, 'deploy')).map((f) => ({ file: relative(repoRoot, f), text: readFileSync(f, 'utf8') }));

  it('finds the entries of the image, compose and the manifests', () => {
    const named = all.flatMap((f) => entries(f.text));
    expect(named).toContain('services/executor/src/main.ts');
    expect(named.some((p) => p.endsWith('/main.ts') && p.includes('staging'))).toBe(true);
    expect(named.length).toBeGreaterThan(15);
  });

  it('every one exists', () => {
    const missing = all.flatMap((f) =>
      entries(f.text)
        .filter((p) => !existsSync(resolve(repoRoot, p)))
        .map((p) => `${f.file}: ${p}`),
    );
    expect(missing).toEqual([]);
  });
});
