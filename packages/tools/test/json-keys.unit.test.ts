import { describe, expect, it } from 'vitest';
import { duplicateJsonKey } from '../src/index.ts';

// The rule of docs/decisions/0687: one JSON object names each key once; the scan never throws and
// leaves text that is not JSON to JSON.parse.
describe('duplicateJsonKey', () => {
  it.each<[string, string | null]>([
    ['{"a":1,"b":2}', null],
    ['{"a":1,"a":2}', 'a'],
    ['{"a":{"a":1},"b":[{"a":1},{"a":2}]}', null],
    ['[{"x":1,"y":{"z":1,"z":[1]}}]', 'z'],
    ['{"mode":"x","mo\\u0064e":"y"}', 'mode'],
    ['{"a":"\\"a\\":1","b":"{\\"b\\":2,\\"b\\":3}"}', null],
    ['{"a":[1,"a",{"b":1}],"a":0}', 'a'],
    ['{"a":', null],
    ['{"a\\', null],
    ['"{\\"a\\":1,\\"a\\":2}"', null],
    ['', null],
  ])('%s → %s', (text, key) => {
    expect(duplicateJsonKey(text)).toBe(key);
  });

  it('scans a body nested 200,000 levels deep without a call frame per level', () => {
    const deep = '{"k":'.repeat(200_000) + '1' + '}'.repeat(200_000);
    expect(duplicateJsonKey(deep)).toBeNull();
    expect(duplicateJsonKey('['.repeat(200_000) + '{"a":1,"a":2}' + ']'.repeat(200_000))).toBe('a');
  });
});
