import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ACTION_INITIAL_STATUSES, ACTION_TRANSITIONS, STATE_REQUIRES, WORKFLOW_TRANSITIONS } from '../src/index.ts';

/**
 * docs/product/states.md#transition-table is generated from the tables of
 * packages/ledger/src/transitions.ts: this test fails when the page and the code differ.
 * `UPDATE_STATES_DOC=1 npx vitest run packages/ledger/test/transitions-doc.unit.test.ts` rewrites it.
 */
const PAGE = new URL('../../../docs/product/states.md', import.meta.url);
const START =
  '<!-- transition-table:start (generated from packages/ledger/src/transitions.ts; see packages/ledger/test/transitions-doc.unit.test.ts) -->';
const END = '<!-- transition-table:end -->';

function render(): string {
  const wf = WORKFLOW_TRANSITIONS.map((t) => `| \`${t.from}\` | \`${t.to}\` | \`${t.guard}\` | ${t.why} |`);
  const act = ACTION_TRANSITIONS.map((t) => `| \`${t.from}\` | \`${t.to}\` | \`${t.guard}\` | ${t.why} |`);
  const requires = Object.entries(STATE_REQUIRES).map(([s, r]) => `\`${s}\` (${r.map((x) => `\`${x}\``).join(', ')})`);
  return [
    START,
    '',
    'Workflow (`WORKFLOW_TRANSITIONS`; a move into ' + requires.join(', ') + ' also writes those fields):',
    '',
    '| from | to | guard | taken by |',
    '|---|---|---|---|',
    ...wf,
    '',
    `Action (\`ACTION_TRANSITIONS\`; a row is created in ${ACTION_INITIAL_STATUSES.map((s) => `\`${s}\``).join(', ')}):`,
    '',
    '| from | to | guard | taken by |',
    '|---|---|---|---|',
    ...act,
    '',
    END,
  ].join('\n');
}

describe('docs/product/states.md', () => {
  it('shows the transition tables exactly as the code has them', () => {
    const page = readFileSync(PAGE, 'utf8');
    const at = page.indexOf(START);
    const end = page.indexOf(END);
    const expected = render();
    if (process.env.UPDATE_STATES_DOC === '1' && at >= 0 && end > at) {
      writeFileSync(PAGE, page.slice(0, at) + expected + page.slice(end + END.length));
      return;
    }
    expect(at, 'the generated section is present').toBeGreaterThanOrEqual(0);
    expect(page.slice(at, end + END.length)).toBe(expected);
  });
});
