import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

// The transition table is the one writer of workflows.state and actions.status: no module
// outside packages/ledger/src/transitions.ts may update either column directly (tests may seed).

const ROOT = resolve(import.meta.dirname, '../../..');
const OWNER = 'packages/ledger/src/transitions.ts';

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (name === 'node_modules' || name === 'test') return [];
    if (statSync(p).isDirectory()) return sources(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

/** Each `updateTable('<table>')` statement (up to its execute) that sets `column`. */
function directWrites(text: string, table: string, column: string): string[] {
  const out: string[] = [];
  const re = new RegExp(`updateTable\\('${table}'\\)([\\s\\S]*?)\\.execute`, 'g');
  for (const m of text.matchAll(re)) if (new RegExp(`\\b${column}:`).test(m[1] ?? '')) out.push(m[0].slice(0, 120));
  const raw = new RegExp(`UPDATE\\s+${table}\\s+SET[^;\`]*\\b${column}\\s*=`, 'gi');
  for (const m of text.matchAll(raw)) out.push(m[0].slice(0, 120));
  return out;
}

describe('one writer of workflow and action state', () => {
  const files = ['packages', 'services', 'synthetic', 'apps']
    .filter((d) => existsSync(join(ROOT, d)))
    .flatMap((d) =>
      readdirSync(join(ROOT, d)).flatMap((pkg) => {
        const src = join(ROOT, d, pkg, 'src');
        try {
          return sources(src);
        } catch {
          return [];
        }
      }),
    );

  it('finds the sources it checks', () => {
    expect(files.map((f) => relative(ROOT, f))).toContain(OWNER);
    expect(files.length).toBeGreaterThan(50);
  });

  it('only the transition table updates workflows.state and actions.status', () => {
    const offenders = files
      .filter((f) => relative(ROOT, f) !== OWNER)
      .flatMap((f) => {
        const text = readFileSync(f, 'utf8');
        return [...directWrites(text, 'workflows', 'state'), ...directWrites(text, 'actions', 'status')].map(
          (w) => `${relative(ROOT, f)}: ${w}`,
        );
      });
    expect(offenders).toEqual([]);
  });

  it('the check sees a direct write when there is one (control)', () => {
    const sample = "await trx.updateTable('workflows').set({ state: 'stopped', updated_at: new Date() }).where('id', '=', id).execute();";
    expect(directWrites(sample, 'workflows', 'state')).toHaveLength(1);
    expect(directWrites("await trx.updateTable('workflows').set({ next_step: 'x' }).execute()", 'workflows', 'state')).toEqual([]);
  });
});
