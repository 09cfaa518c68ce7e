import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';

// The layout (docs/decisions/0330-layout.md): every service is a package with a real entry,
// `src/index.ts`, holding what runs outside its process may use (app factories, processors,
// test hooks); nothing outside a service reaches into its other files.

/** Folders holding one process each: the product's services and the synthetic stand-ins. */
const PROCESS_ROOTS = ['services', 'synthetic', 'apps'];

const processes = PROCESS_ROOTS.flatMap((root) =>
  existsSync(resolve(repoRoot, root)) ? readdirSync(resolve(repoRoot, root)).map((name) => `${root}/${name}`) : [],
);

function trackedTs(): string[] {
  const out = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard', '*.ts'], {
    cwd: repoRoot,
    encoding: 'utf8',
  });
  return out.split('\0').filter((f) => f.endsWith('.ts') && existsSync(resolve(repoRoot, f)));
}

/** Every module specifier a file imports (static, dynamic, `export … from`). */
function specifiers(text: string): string[] {
  return [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)['"]([^'"]+)['"]/g)].map((m) => m[1]!);
}

describe('the layout', () => {
  it('every service exports a real entry, src/index.ts, named by its package.json', () => {
    expect(processes.length).toBeGreaterThanOrEqual(8);
    for (const dir of processes) {
      const pkg = JSON.parse(readFileSync(resolve(repoRoot, dir, 'package.json'), 'utf8')) as { exports?: Record<string, string> };
      expect(pkg.exports?.['.'], dir).toBe('./src/index.ts');
      expect(existsSync(resolve(repoRoot, dir, 'src/index.ts')), `${dir}/src/index.ts`).toBe(true);
      expect(existsSync(resolve(repoRoot, dir, 'src/main.ts')), `${dir}/src/main.ts`).toBe(true);
    }
  });

  it('nothing outside a service imports its files but src/index.ts', () => {
    const names = processes.map((d) => d.split('/')[1]!);
    const deepPath = new RegExp(`(^|/)(${PROCESS_ROOTS.join('|')})/(${names.join('|')})/src/(?!index\\.ts$)`);
    const deepName = new RegExp(`^@gatehouse/(${names.join('|')})/`);
    const found: string[] = [];
    for (const file of trackedTs()) {
      const own = processes.find((d) => file.startsWith(`${d}/`));
      for (const spec of specifiers(readFileSync(resolve(repoRoot, file), 'utf8'))) {
        if (deepName.test(spec)) found.push(`${file}: ${spec}`);
        else if (!own && spec.startsWith('.') && deepPath.test(spec.replace(/^(\.\.?\/)+/, ''))) found.push(`${file}: ${spec}`);
      }
    }
    expect(found).toEqual([]);
  });
});
