/** A cell: text as is, numbers as given (already rounded), null/undefined as `–`. */
export type Cell = string | number | null | undefined;

/**
 * Renders rows as a Markdown table (readable in a terminal and pasteable into the README):
 * columns padded to their widest cell, numbers right-aligned.
 */
export function markdownTable(header: string[], rows: Cell[][]): string {
  const text = (c: Cell): string => (c === null || c === undefined ? '–' : String(c));
  const cells = [header, ...rows.map((r) => r.map(text))];
  const widths = header.map((_, i) => Math.max(3, ...cells.map((r) => (r[i] ?? '').length)));
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || r[i] == null));
  const line = (r: string[]): string => `| ${r.map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (numeric[i] ? `${'-'.repeat(w + 1)}:` : `${'-'.repeat(w + 2)}`)).join('|')}|`;
  return [line(cells[0]!), rule, ...cells.slice(1).map(line)].join('\n');
}
