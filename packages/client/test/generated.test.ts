import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLIENT_ROOT, renderGenerated } from '../scripts/render-generated.ts';

// The committed documents and types are what the zod contracts generate today: after a contract
// change this fails until `pnpm -F @gatehouse/client generate` has run and its output is committed.
describe('@gatehouse/client generated files', () => {
  it('are up to date with packages/contracts/src/api', async () => {
    const expected = await renderGenerated();
    expect(Object.keys(expected).sort()).toEqual([
      'openapi/approval.json',
      'openapi/intake.json',
      'openapi/ops.json',
      'src/generated/approval.ts',
      'src/generated/intake.ts',
      'src/generated/ops.ts',
    ]);
    const stale = Object.entries(expected)
      .filter(([path, content]) => readFileSync(resolve(CLIENT_ROOT, path), 'utf8') !== content)
      .map(([path]) => path);
    expect(stale, 'stale: run `pnpm -F @gatehouse/client generate`').toEqual([]);
  });
});
