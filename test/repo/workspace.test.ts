import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot } from '@gatehouse/contracts';

// The workspace's own rules (docs/decisions/0300-workspace-tasks.md): one version of each
// external dependency (the pnpm catalog), the Node and pnpm it needs, tasks turbo runs, and
// unit tests that need nothing running.
interface PackageJson {
  name: string;
  engines?: { node?: string };
  packageManager?: string;
  scripts?: Record<string, string>;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}
const read = (file: string): PackageJson => JSON.parse(readFileSync(resolve(repoRoot, file), 'utf8')) as PackageJson;
const workspaceFiles = [
  'package.json',
  ...['packages', 'services', 'synthetic', 'apps'].flatMap((d) => readdirSync(resolve(repoRoot, d)).map((x) => `${d}/${x}/package.json`)),
  'migrations/package.json',
  'test/package.json',
].filter((f) => existsSync(resolve(repoRoot, f)));
const workspace = parse(readFileSync(resolve(repoRoot, 'pnpm-workspace.yaml'), 'utf8')) as { catalog: Record<string, string> };

function listFiles(dir: string, suffix: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listFiles(resolve(dir, e.name), suffix) : e.name.endsWith(suffix) ? [resolve(dir, e.name)] : [],
  );
}

describe('the workspace', () => {
  it('needs Node ≥ 22.18 (TypeScript without a flag) and names its package manager', () => {
    const root = read('package.json');
    expect(root.engines?.node).toBe('>=22.18');
    expect(root.packageManager).toMatch(/^pnpm@10\.\d+\.\d+$/);
  });

  it('takes every external version from the catalog, and the catalog holds only what is used', () => {
    const used = new Set<string>();
    for (const file of workspaceFiles) {
      const p = read(file);
      for (const [name, spec] of Object.entries({ ...p.dependencies, ...p.devDependencies })) {
        expect(spec, `${file}: ${name}`).toMatch(/^(catalog:|workspace:\*)$/);
        if (spec === 'catalog:') used.add(name);
      }
    }
    expect(Object.keys(workspace.catalog).sort()).toEqual([...used].sort());
  });

  it('turbo runs the root tasks the check script names, each a script of the root package', () => {
    const turbo = JSON.parse(readFileSync(resolve(repoRoot, 'turbo.json'), 'utf8')) as { tasks: Record<string, unknown> };
    const root = read('package.json');
    const tasks = root.scripts!.check!.match(/turbo run (.*?) --/)![1]!.split(' ');
    for (const task of tasks) {
      expect(turbo.tasks, task).toHaveProperty([`//#${task}`]);
      expect(root.scripts, task).toHaveProperty([task]);
    }
  });

  it('unit tests need nothing running: no database, queue, HTTP server or child process', () => {
    const unit = ['packages', 'services', 'synthetic', 'apps'].flatMap((d) =>
      readdirSync(resolve(repoRoot, d)).flatMap((x) => listFiles(resolve(repoRoot, d, x, 'test'), '.unit.test.ts')),
    );
    expect(unit.length).toBeGreaterThan(10);
    const markers =
      /from '(@gatehouse\/testing|@gatehouse\/test-harness|pg|ioredis|bullmq|supertest|playwright-core|node:child_process|node:net|node:http)'|\.listen\(|startHarness|createDb\(/;
    for (const file of unit) expect(readFileSync(file, 'utf8'), file).not.toMatch(markers);
  });
});
