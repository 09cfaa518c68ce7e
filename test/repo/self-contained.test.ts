import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';

// The repository stands on its own: a clone has no specification folder beside it, so nothing
// tracked may cite one, and every link to the product documentation (docs/product/) must land on
// a page and heading that exist.

const SELF = 'test/repo/self-contained.test.ts';

/** Citations of documents outside the repository. Built from parts so this file does not match itself. */
const FOREIGN_CITATIONS: readonly RegExp[] = [
  new RegExp(['SPEC', '(\\.md| §)'].join('')),
  new RegExp(['ARCHITECTURE', '(\\.md| rule| correctness|\\s+")'].join('')),
  new RegExp(['CONVENTIONS', '\\.md'].join('')),
  new RegExp(['\\.\\.', '/shared'].join('')),
  new RegExp(['shared', '/(fixtures|reference)'].join('')),
];

const TEXT = /\.(ts|js|mjs|cjs|md|json|ya?ml|sh|html|css|sql|txt|toml)$|(^|\/)(run|Dockerfile|\.[\w-]+rc)$/;

function trackedTextFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '-z'], { cwd: repoRoot, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return out.split('\0').filter((f) => f && TEXT.test(f) && f !== 'pnpm-lock.yaml' && existsSync(join(repoRoot, f)));
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

const anchorCache = new Map<string, Set<string>>();
function anchorsOf(file: string): Set<string> {
  let anchors = anchorCache.get(file);
  if (!anchors) {
    const headings = readFileSync(join(repoRoot, file), 'utf8').match(/^#{1,6} .+$/gm) ?? [];
    anchors = new Set(headings.map((h) => slug(h.replace(/^#+ /, ''))));
    anchorCache.set(file, anchors);
  }
  return anchors;
}

/** A broken link `target` (repository-relative path, optional anchor) found in `from`, or null. */
function brokenLink(from: string, target: string, anchor: string | undefined): string | null {
  if (!existsSync(join(repoRoot, target))) return `${from}: ${target} does not exist`;
  if (anchor && !anchorsOf(target).has(anchor)) return `${from}: ${target}#${anchor} names no heading`;
  return null;
}

const files = trackedTextFiles();

describe('the repository stands on its own', () => {
  it('finds the tracked files', () => {
    expect(files).toContain('README.md');
    expect(files).toContain('docs/product/README.md');
  });

  it('no tracked file cites the specification folder beside the repository', () => {
    const found: string[] = [];
    for (const file of files) {
      if (file === SELF || file.startsWith('docs/decisions/')) continue;
      readFileSync(join(repoRoot, file), 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (FOREIGN_CITATIONS.some((re) => re.test(line))) found.push(`${file}:${i + 1}: ${line.trim().slice(0, 120)}`);
        });
    }
    expect(found).toEqual([]);
  });

  it('every docs/product link in the repository names a page and heading that exist', () => {
    const broken: string[] = [];
    for (const file of files) {
      if (file === SELF) continue;
      const text = readFileSync(join(repoRoot, file), 'utf8');
      for (const m of text.matchAll(/docs\/product\/([\w.-]+\.md)(?:#([\w-]+))?/g)) {
        const problem = brokenLink(file, `docs/product/${m[1]}`, m[2]);
        if (problem) broken.push(problem);
      }
    }
    expect(broken).toEqual([]);
  });

  it('relative Markdown links in docs/ land on a page and heading that exist', () => {
    const broken: string[] = [];
    for (const file of files.filter((f) => f.startsWith('docs/') && f.endsWith('.md'))) {
      const text = readFileSync(join(repoRoot, file), 'utf8');
      for (const m of text.matchAll(/\]\(([^)\s:]+?\.md)?(?:#([\w-]+))?\)/g)) {
        const target = m[1] ? normalize(join(dirname(file), m[1])) : file;
        const problem = brokenLink(file, target, m[2]);
        if (problem) broken.push(problem);
      }
    }
    expect(broken).toEqual([]);
  });

  it('every repository path the product documentation names exists', () => {
    const tracked = new Set(files);
    const missing: string[] = [];
    for (const file of files.filter((f) => f.startsWith('docs/product/'))) {
      const text = readFileSync(join(repoRoot, file), 'utf8');
      for (const m of text.matchAll(/`((?:test|packages|services|migrations|policy|releases)\/[\w./-]+\.(?:ts|json))`/g)) {
        if (!tracked.has(m[1]!)) missing.push(`${file}: ${m[1]}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
