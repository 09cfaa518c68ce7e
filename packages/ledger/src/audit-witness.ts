import { closeSync, existsSync, fstatSync, fsyncSync, mkdirSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/**
 * One anchor as the witness keeps it, outside Postgres (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md):
 * the anchored sequence number, the chain hash at it, the Ed25519 signature over `<seq>:<hash>`
 * (base64) and when it was written (ISO 8601).
 */
export interface WitnessedAnchor {
  seq: number;
  hash: string;
  signature: string;
  at: string;
}

/**
 * Where the witness is kept when `AUDIT_ANCHOR_WITNESS_PATH` is unset (local and test only;
 * production requires the setting): `audit-anchors.jsonl` beside the audit signing key
 * `signingKeyPath`, i.e. in the state folder of a local stack, and in a test stack's own folder.
 */
export function defaultWitnessPath(signingKeyPath: string): string {
  return resolve(dirname(signingKeyPath), 'audit-anchors.jsonl');
}

/**
 * Appends `anchor` to the witness file at `path` as one JSON line, creating the file (mode 0600)
 * and its folder when absent, and flushes it to disk before returning. The file is opened for
 * append only: a line is never rewritten. One short write per line, so replicas appending to one
 * file do not interleave.
 * @throws Error (from node:fs) when the folder or file cannot be created or written.
 */
export function appendWitness(path: string, anchor: WitnessedAnchor): void {
  mkdirSync(dirname(path), { recursive: true });
  const fd = openSync(path, 'a+', 0o600);
  try {
    const line = `${JSON.stringify({ seq: anchor.seq, hash: anchor.hash, signature: anchor.signature, at: anchor.at })}\n`;
    // A line cut short by a crash (or a full disk) ends without a newline: start on a line of our
    // own, so the torn one stays alone and this anchor stays readable (ADR 0662).
    const buf = Buffer.from(tornTail(fd) ? `\n${line}` : line);
    // writeSync may write less than asked (a full disk): write the rest, or fail.
    for (let done = 0; done < buf.length;) done += writeSync(fd, buf, done, buf.length - done);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Whether the file open on `fd` (readable) is non-empty and does not end with a newline. */
function tornTail(fd: number): boolean {
  const size = fstatSync(fd).size;
  if (size === 0) return false;
  const last = Buffer.alloc(1);
  readSync(fd, last, 0, 1, size - 1);
  return last[0] !== 0x0a;
}

/** The start every line {@link appendWitness} writes has: a torn line is a prefix of such a line. */
const LINE_START = '{"seq":';

/**
 * Whether `line` is a write cut short (a crash or a full disk while appending): it starts as every
 * witness line does and is not JSON. Such a line witnesses nothing, and skipping it hides no more
 * than deleting it would; any other line that is not an anchor (complete JSON of another shape,
 * text that does not start as a witness line) is still refused.
 */
function isTorn(line: string): boolean {
  if (!line.startsWith(LINE_START)) return false;
  try {
    JSON.parse(line);
    return false;
  } catch {
    return true;
  }
}

/**
 * Reads every anchor of the witness file at `path`, in file order. Blank lines are skipped, and so
 * are torn lines (a write cut short by a crash, see {@link isTorn}), each told to `onTorn` with its
 * 1-based line number (ADR 0662).
 * @throws Error when the file does not exist, or naming the first line that is neither a witnessed
 * anchor (JSON with a positive integer `seq` and string `hash`, `signature` and `at`) nor torn.
 */
export function readWitness(path: string, onTorn?: (line: number) => void): WitnessedAnchor[] {
  if (!existsSync(path)) throw new Error(`anchor witness ${path} does not exist`);
  const anchors: WitnessedAnchor[] = [];
  readFileSync(path, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      // A crash may also leave the file's tail zero-filled (XFS, ext4 data=writeback): NULs witness nothing.
      if (!line.replace(/\0/g, '').trim()) return;
      if (isTorn(line)) return void onTorn?.(i + 1);
      const a = parseLine(line);
      if (!a) throw new Error(`anchor witness ${path} line ${i + 1} is not a witnessed anchor`);
      anchors.push(a);
    });
  return anchors;
}

/** One witness line as a {@link WitnessedAnchor}, or null when it is not one. */
function parseLine(line: string): WitnessedAnchor | null {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null) return null;
  const { seq, hash, signature, at } = v as Record<string, unknown>;
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) return null;
  if (typeof hash !== 'string' || typeof signature !== 'string' || typeof at !== 'string') return null;
  return { seq, hash, signature, at };
}
