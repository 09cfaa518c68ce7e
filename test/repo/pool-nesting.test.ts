import { relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';

// No code waits for a second connection of a pool while it holds one (docs/decisions/0788): inside
// a transaction (`transact`, `inTransaction`, `db.transaction().execute`, a checked-out
// `db.connection().execute`, or any callback handed a transaction), every statement goes through
// that transaction. A read through the pool there needs a second connection while the first is
// held, and as many such callbacks in flight as the pool has connections hang for good (the staging
// systems did: ADR 0786). This file type-checks every package's, service's, application's and
// synthetic system's `src` and, inside each such callback, refuses: an expression of a pool type
// (`Kysely`, not `Transaction`; a `pg` pool), and a call of a function that reaches a pool other
// than through its own parameters (`this.db`, a captured `db`, `deps.db`), directly or through
// the functions it calls, or that leaves a parameter defaulting to a pool unset.

const SOURCE = /\/(packages|services|apps|synthetic)\/[^/]+\/src\//;
/** Callbacks that may name a pool, each with why it cannot starve one. */
const ALLOWED: Record<string, string> = {
  // The epoch fence holds an epoch-pool connection and then takes one of the staging pool; nothing
  // holds a staging connection while waiting for an epoch one (ADR 0685's two databases).
  'synthetic/staging/src/db/revocation-epoch.ts:94 db': 'a second pool, taken in one order',
  // A test's tamper helper, handed the audit owner's transaction typed as the ledger handle.
  'packages/test-harness/src/audit-tamper.ts:40 trx': 'the transaction itself',
};
/** Parameter names that are a transaction when the type says only "a Kysely handle". */
const TRANSACTION_NAMES = /^(trx|tx|etrx)$/;
type Fn = ts.FunctionLikeDeclaration;

/** The type checker over every `src` file of the workspace (the root tsconfig's options). */
function program(): { checker: ts.TypeChecker; files: ts.SourceFile[]; root: string } {
  const root = repoRoot;
  const parsed = ts.getParsedCommandLineOfConfigFile(
    resolve(root, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  )!;
  const names = parsed.fileNames.filter((f) => SOURCE.test(f));
  const p = ts.createProgram(names, parsed.options);
  return { checker: p.getTypeChecker(), files: names.map((n) => p.getSourceFile(n)!), root };
}

/** Finds pool handles and pool-reaching calls inside transaction callbacks. */
class PoolNesting {
  readonly #checker: ts.TypeChecker;
  readonly #root: string;
  readonly #reach = new Map<Fn, string | null>();
  readonly findings = new Set<string>();
  /** The {@link ALLOWED} entries met (one not met is stale). */
  readonly allowed = new Set<string>();

  constructor(checker: ts.TypeChecker, root: string) {
    this.#checker = checker;
    this.#root = root;
  }

  where(n: ts.Node): string {
    const sf = n.getSourceFile();
    return `${relative(this.#root, sf.fileName)}:${sf.getLineAndCharacterOfPosition(n.getStart()).line + 1}`;
  }

  isPool(t: ts.Type): boolean {
    if (t.isUnion()) return t.types.some((u) => this.isPool(u));
    const name = t.getSymbol()?.getName();
    return name === 'Kysely' || name === 'Pool' || name === 'BoundPool';
  }

  /** An identifier or property read (not a type, not the name after a dot) whose type is a pool. */
  poolExpression(n: ts.Node): n is ts.Identifier | ts.PropertyAccessExpression {
    if (!ts.isIdentifier(n) && !ts.isPropertyAccessExpression(n)) return false;
    if (n.parent && ts.isPropertyAccessExpression(n.parent) && n.parent.name === n) return false;
    for (let p = n.parent; p && !ts.isStatement(p) && !ts.isSourceFile(p); p = p.parent) {
      if (ts.isTypeNode(p) || ts.isHeritageClause(p)) return false;
    }
    return this.isPool(this.#checker.getTypeAtLocation(n));
  }

  /** The callback a call runs while holding a connection, if any. */
  heldCallback(call: ts.CallExpression): Fn | undefined {
    const e = call.expression;
    const fnArg = (a: ts.Expression | undefined): Fn | undefined =>
      a && (ts.isArrowFunction(a) || ts.isFunctionExpression(a)) ? a : undefined;
    if (ts.isIdentifier(e) && (e.text === 'transact' || e.text === 'inTransaction')) return fnArg(call.arguments[1]);
    if (ts.isPropertyAccessExpression(e) && e.name.text === 'execute' && /\.(transaction|connection)\(\)/.test(e.expression.getText())) {
      return fnArg(call.arguments[0]);
    }
    return call.arguments.map(fnArg).find((f) => f?.parameters.some((p) => this.#isTransaction(p)));
  }

  #isTransaction(p: ts.ParameterDeclaration): boolean {
    return TRANSACTION_NAMES.test(p.name.getText()) || this.#checker.getTypeAtLocation(p).getSymbol()?.getName() === 'Transaction';
  }

  /** The body of the function a call names, when it is source of this workspace. */
  callee(call: ts.CallExpression): Fn | undefined {
    const at = ts.isPropertyAccessExpression(call.expression) ? call.expression.name : call.expression;
    let s = this.#checker.getSymbolAtLocation(at);
    if (s && s.flags & ts.SymbolFlags.Alias) s = this.#checker.getAliasedSymbol(s);
    const d = s?.valueDeclaration ?? s?.declarations?.[0];
    if (!d || d.getSourceFile().isDeclarationFile) return undefined;
    if (ts.isFunctionLike(d) && (d as Fn).body) return d as Fn;
    const init = ts.isVariableDeclaration(d) || ts.isPropertyDeclaration(d) ? d.initializer : undefined;
    return init && (ts.isArrowFunction(init) || ts.isFunctionExpression(init)) ? init : undefined;
  }

  /** A parameter the call leaves to a default that is a pool, as text, else null. */
  omittedPoolDefault(call: ts.CallExpression, fn: Fn): string | null {
    const p = fn.parameters
      .slice(call.arguments.length)
      .find((q) => q.initializer && this.isPool(this.#checker.getTypeAtLocation(q.initializer)));
    return p ? p.getText() : null;
  }

  /** How `fn` reaches a pool other than through a parameter that is one, or null (memoised). */
  reaches(fn: Fn): string | null {
    if (this.#reach.has(fn)) return this.#reach.get(fn) ?? null;
    this.#reach.set(fn, null); // recursion: a cycle adds nothing
    let why: string | null = null;
    const visit = (n: ts.Node): void => {
      if (why) return;
      if (this.poolExpression(n) && this.#captured(n, fn)) why = `${n.getText()} @${this.where(n)}`;
      else if (ts.isCallExpression(n)) why = this.#callReaches(n, fn);
      if (!why) ts.forEachChild(n, visit);
    };
    if (fn.body) visit(fn.body);
    this.#reach.set(fn, why);
    return why;
  }

  #callReaches(call: ts.CallExpression, from: Fn): string | null {
    const d = this.callee(call);
    if (!d || d === from) return null;
    const inner = this.reaches(d);
    if (inner) return `${call.expression.getText()} -> ${inner}`;
    const dflt = this.omittedPoolDefault(call, d);
    return dflt ? `${call.expression.getText()} leaves ${dflt}` : null;
  }

  /** Whether a pool expression in `fn` is not simply one of `fn`'s parameters or locals. */
  #captured(n: ts.Identifier | ts.PropertyAccessExpression, fn: Fn): boolean {
    let root: ts.Expression = n;
    while (ts.isPropertyAccessExpression(root)) root = root.expression;
    if (!ts.isIdentifier(root)) return true; // this.db
    const d = this.#checker.getSymbolAtLocation(root)?.valueDeclaration;
    const inside = d !== undefined && d.pos >= fn.pos && d.end <= fn.end && d.getSourceFile() === fn.getSourceFile();
    if (!inside) return true; // captured from outside
    return ts.isParameter(d) && root !== n; // deps.db: the caller's pool, carried in an object
  }

  /** Records what the callback of a held connection does with a pool. */
  checkHeld(call: ts.CallExpression, cb: Fn): void {
    const visit = (n: ts.Node): void => {
      if (this.poolExpression(n)) this.#report(call, n, 'names the pool');
      if (ts.isCallExpression(n)) {
        const d = this.callee(n);
        const why = d && (this.reaches(d) ?? this.omittedPoolDefault(n, d));
        if (why) this.#report(call, n.expression, `calls it: ${why}`);
      }
      ts.forEachChild(n, visit);
    };
    if (cb.body) ts.forEachChild(cb.body, visit);
  }

  #report(held: ts.CallExpression, at: ts.Node, what: string): void {
    const key = `${this.where(at)} ${at.getText()}`;
    if (ALLOWED[key]) return void this.allowed.add(key);
    this.findings.add(`${this.where(at)} ${at.getText()} ${what} (connection held since ${this.where(held)})`);
  }
}

describe('waits for a second connection of one pool', () => {
  it('no transaction callback of any src reaches its pool', () => {
    const { checker, files, root } = program();
    const scan = new PoolNesting(checker, root);
    const visit = (n: ts.Node): void => {
      if (ts.isCallExpression(n)) {
        const cb = scan.heldCallback(n);
        if (cb) scan.checkHeld(n, cb);
      }
      ts.forEachChild(n, visit);
    };
    for (const f of files) visit(f);
    expect([...scan.findings]).toEqual([]);
    expect([...scan.allowed].sort()).toEqual(Object.keys(ALLOWED).sort());
  }, 420_000); // one type-check of every source: 30–160 s on 2 cores, by load
});
