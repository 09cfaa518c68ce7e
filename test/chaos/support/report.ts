import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';
import type { FaultResult } from './run-fault.ts';

/** Where a suite writes its results: `test-results/chaos-<suite>.json` at the repository root. */
export function reportPath(suite: string): string {
  return resolve(repoRoot, 'test-results', `chaos-${suite}.json`);
}

/**
 * The results as a fixed-width table: fault, runs, in flight, stuck, crashed processes, duplicate
 * effects, … and how many runs ended `stopped` (terminal, so not stuck, but a run an outage cut
 * short — e.g. `budget_exhausted` — is worth a look: the JSON has each ending with its reason).
 */
export function formatTable(results: readonly FaultResult[]): string {
  const head = [
    'fault',
    'runs',
    'in flight',
    'stuck',
    'crashed processes',
    'duplicate effects',
    'effects≠succeeded',
    'recon open',
    'chain',
    'ended stopped',
    'result',
  ];
  const rows = results.map((r) => [
    r.fault,
    String(r.runs),
    String(r.inFlightAtFault),
    String(r.stuck),
    r.crashed.length ? `${r.crashed.length} ${r.crashed.join(' ')}` : '0',
    String(r.duplicates),
    String(r.mismatches),
    String(r.reconUnexplained),
    r.chainIntact ? 'intact' : 'BROKEN',
    String(Object.entries(r.endings).reduce((n, [ending, count]) => n + (ending.startsWith('stopped') ? count : 0), 0)),
    r.failures.length ? 'FAIL' : 'ok',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]): string => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

/** Writes every result so far as JSON to {@link reportPath} (after each fault: a run cut short keeps its rows). */
export function saveResults(suite: string, results: readonly FaultResult[]): string {
  const file = reportPath(suite);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify({ suite, at: new Date().toISOString(), results }, null, 2)}\n`);
  return file;
}

/** Prints the table (and each failure) and writes every result as JSON to {@link reportPath}. */
export function writeReport(suite: string, results: readonly FaultResult[]): string {
  const file = saveResults(suite, results);
  const failures = results.flatMap((r) => r.failures.map((f) => `  ${r.fault}: ${f}`));
  console.log(
    `\nChaos (${suite})\n${formatTable(results)}\n${failures.length ? `failures:\n${failures.join('\n')}\n` : ''}written to ${file}`,
  );
  return file;
}
