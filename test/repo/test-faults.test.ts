import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';

// One owner of the test-only switches (docs/decisions/0016-test-only-hooks.md,
// docs/decisions/0330-layout.md): packages/contracts/src/test-faults.ts reads every
// `GATEHOUSE_TEST_*` variable once, validated, into one typed object. Any other source file of a
// package, service, synthetic system or application that names such a variable in code (not in a
// comment) reads it on its own, per call, unvalidated; and the reset exists for tests only.

const OWNER = 'packages/contracts/src/test-faults.ts';
const SOURCE_ROOTS = ['packages', 'services', 'synthetic', 'apps'];

function listTs(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? e.name === 'node_modules'
        ? []
        : listTs(resolve(dir, e.name))
      : e.name.endsWith('.ts')
        ? [resolve(dir, e.name)]
        : [],
  );
}

/** Every `src/**.ts` of every workspace package under the source roots, repository-relative. */
function sourceFiles(): string[] {
  return SOURCE_ROOTS.flatMap((root) =>
    existsSync(resolve(repoRoot, root))
      ? readdirSync(resolve(repoRoot, root)).flatMap((pkg) => listTs(resolve(repoRoot, root, pkg, 'src')))
      : [],
  ).map((f) => relative(repoRoot, f));
}

/** The code of a TypeScript file without its comments (block and line). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

const files = sourceFiles();

describe('the test-only switches have one owner', () => {
  it('finds the sources and the owner', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(files).toContain(OWNER);
  });

  it('no source file but the owner reads a GATEHOUSE_TEST_ variable', () => {
    const readers = files.filter((f) => f !== OWNER && /GATEHOUSE_TEST_/.test(code(readFileSync(resolve(repoRoot, f), 'utf8'))));
    expect(readers).toEqual([]);
  });

  it('resetTestFaultsForTests is called from tests only', () => {
    const callers = files.filter((f) => f !== OWNER && /resetTestFaultsForTests/.test(code(readFileSync(resolve(repoRoot, f), 'utf8'))));
    expect(callers).toEqual([]);
  });
});
