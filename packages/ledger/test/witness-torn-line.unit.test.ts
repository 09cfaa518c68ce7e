import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { appendWitness, readWitness, type WitnessedAnchor } from '../src/index.ts';

// The anchor witness after a crash (or a full disk) cut a line short while the audit service
// appended it (ADR 0662): the next anchor starts on a line of its own, the torn line is skipped
// and named, and `audit verify` and the audit_gap monitor do not fail for ever on it. A line that
// is not a torn anchor line is still refused.

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const witnessFile = (): string => {
  const d = mkdtempSync(resolve(tmpdir(), 'gh-witness-'));
  dirs.push(d);
  return resolve(d, 'audit-anchors.jsonl');
};
const anchor = (seq: number): WitnessedAnchor => ({ seq, hash: 'a'.repeat(64), signature: 'c2ln', at: new Date(0).toISOString() });

describe('a witness line torn by a crash', () => {
  it('the next anchor starts a line of its own; reading skips the torn line and names it', () => {
    const path = witnessFile();
    appendWitness(path, anchor(1));
    // The crash: half of anchor 2's line, no newline.
    appendFileSync(path, JSON.stringify(anchor(2)).slice(0, 30));
    appendWitness(path, anchor(3));
    const lines = readFileSync(path, 'utf8').split('\n');
    expect(JSON.parse(lines[2]!)).toEqual(anchor(3));
    const torn: number[] = [];
    expect(readWitness(path, (line) => torn.push(line)).map((a) => a.seq)).toEqual([1, 3]);
    expect(torn).toEqual([2]);
  });

  it('a tail zero-filled by a crash is skipped like a blank line; the next anchor still reads', () => {
    const path = witnessFile();
    appendWitness(path, anchor(1));
    appendFileSync(path, '\0'.repeat(64));
    appendWitness(path, anchor(2));
    expect(readWitness(path).map((a) => a.seq)).toEqual([1, 2]);
  });

  it('a line that is not a cut-short anchor line is still refused', () => {
    const path = witnessFile();
    appendWitness(path, anchor(1));
    for (const bad of ['{"seq":2,"hash":"x"}', 'garbage', '{"hash":"x"']) {
      writeFileSync(path, `${JSON.stringify(anchor(1))}\n${bad}\n`);
      expect(() => readWitness(path), bad).toThrow(/line 2 is not a witnessed anchor/);
    }
  });
});
