import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { GatehouseError, NotFound, repoRoot, Unauthorized, UserError } from '@gatehouse/contracts';
import { errorResponseOf, httpStatusOf } from '@gatehouse/platform';

// One error tree (docs/decisions/0290-one-error-tree-and-browser-session.md): every error class of
// every package and service extends contracts' GatehouseError, and its HTTP status comes from the
// platform's one table, by class. This file walks every exported error class of packages/*/src and
// services/*/src and refuses an error class defined outside the tree.

/** The only file that may extend the built-in Error. */
const TREE = 'packages/contracts/src/errors.ts';

/** Files that may still extend Error, with the class: none (nothing may be added here). */
const NOT_YET: Record<string, string[]> = {};

/** The documented status of every error class (the ADR's table; bases and their subclasses). */
const STATUS: Record<string, number> = {
  // bases (packages/contracts/src/errors.ts)
  UserError: 400,
  NotFound: 404,
  Unauthorized: 401,
  Forbidden: 403,
  PolicyDenied: 403,
  ConflictError: 409,
  Gone: 410,
  Refused: 422,
  SystemError: 503,
  AmbiguousOutcome: 500,
  // subclasses
  BodyTooLarge: 503,
  InvalidTokenError: 401,
  TokenRevokedError: 401,
  DelegationRejected: 403, // 401 when the reason is invalid_token… (asserted below)
  DependencyUnavailable: 503,
  IllegalTransition: 409,
  ReleaseMismatch: 409,
  NormalizationError: 400,
  RemediationRefused: 422,
  ReadBackUnavailable: 503,
  RequeueRefused: 409,
  TwoPersonRequired: 403,
  StagedReenableOpen: 422,
  ReenableRefused: 422,
  OperatorRefused: 403,
  LeaseBusy: 409,
  FactsChangedAtClaim: 409,
  ContainmentHeldAtClaim: 409,
  FactsChangedAtDecision: 409,
  UsageError: 400,
  ActivationRefused: 403,
  CanaryRefused: 403,
  RetryableDownstreamError: 503,
  AuditUnavailable: 503,
  SafeToRepeat: 503,
  TranscriptChanged: 409,
  CallIdReused: 409,
  CallIdRefused: 409,
  OpsUsageError: 400,
  UnknownTool: 400,
  QueueOpRefused: 409,
  RollbackRefused: 409,
  RetireRefused: 409,
  WebhookSecretUnreadable: 503,
  MalformedRecord: 503,
  RecordRefused: 422,
  NoAuditLossHeld: 422,
};

/** Every `.ts` file under `dir`, repository-relative. */
function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory() && e.name !== 'node_modules') out.push(...tsFiles(rel));
    else if (e.isFile() && e.name.endsWith('.ts')) out.push(rel);
  }
  return out;
}

const SOURCES = ['packages', 'services', 'synthetic', 'apps'].flatMap((top) =>
  readdirSync(join(repoRoot, top), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .flatMap((d) => {
      try {
        return tsFiles(`${top}/${d.name}/src`);
      } catch {
        return [];
      }
    }),
);

/** `class X extends Error` (or another built-in error) in a source text: the class names. */
function builtinErrorSubclasses(text: string): string[] {
  return [
    ...text.matchAll(
      /\bclass\s+(\w+)(?:<[^>]*>)?\s+extends\s+(?:globalThis\.)?(?:Error|TypeError|RangeError|SyntaxError|AggregateError)\b/g,
    ),
  ].map((m) => m[1]!);
}

describe('no error class outside the tree', () => {
  it('the scan finds a class that extends Error (self-check)', () => {
    expect(builtinErrorSubclasses('export class Oops extends Error {}\nclass B extends globalThis.TypeError {}')).toEqual(['Oops', 'B']);
    expect(builtinErrorSubclasses('class Fine extends GatehouseError {}\nclass Also extends ErrorLike {}')).toEqual([]);
  });

  it(`only ${TREE} extends the built-in Error`, () => {
    expect(SOURCES.length).toBeGreaterThan(100);
    const found: Record<string, string[]> = {};
    for (const file of SOURCES) {
      if (file === TREE) continue;
      const classes = builtinErrorSubclasses(readFileSync(join(repoRoot, file), 'utf8'));
      if (classes.length) found[file] = classes;
    }
    expect(found, 'extend GatehouseError (packages/contracts/src/errors.ts) through one of its bases instead').toEqual(NOT_YET);
  });
});

/** Every class exported by a source file that defines an exported class, keyed by name. */
async function exportedErrorClasses(): Promise<Map<string, { cls: new (...args: never[]) => Error; file: string }>> {
  const found = new Map<string, { cls: new (...args: never[]) => Error; file: string }>();
  for (const file of SOURCES) {
    if (!/export (abstract )?class \w+/.test(readFileSync(join(repoRoot, file), 'utf8'))) continue;
    const mod = (await import(pathToFileURL(join(repoRoot, file)).href)) as Record<string, unknown>;
    for (const [name, value] of Object.entries(mod)) {
      if (typeof value === 'function' && value.prototype instanceof Error) {
        found.set(name, { cls: value as new (...args: never[]) => Error, file: relative(repoRoot, join(repoRoot, file)) });
      }
    }
  }
  return found;
}

describe('every exported error class', async () => {
  const classes = await exportedErrorClasses();

  it('the walk finds the classes of every layer', () => {
    for (const name of [
      'UserError',
      'InvalidTokenError',
      'IllegalTransition',
      'NormalizationError',
      'CanaryRefused',
      'RetryableDownstreamError',
    ]) {
      expect(classes.has(name), name).toBe(true);
    }
  });

  it('extends GatehouseError and maps to its documented status', () => {
    const wrong: string[] = [];
    for (const [name, { cls, file }] of classes) {
      if ((cls as unknown) === GatehouseError || NOT_YET[file]?.includes(name)) continue;
      if (!(cls.prototype instanceof GatehouseError)) {
        wrong.push(`${name} (${file}) does not extend GatehouseError`);
        continue;
      }
      const sample = Object.assign(Object.create(cls.prototype) as GatehouseError, { reason: 'sample' });
      if (STATUS[name] === undefined) wrong.push(`${name} (${file}) has no documented status`);
      else if (httpStatusOf(sample) !== STATUS[name]) wrong.push(`${name} maps to ${httpStatusOf(sample)}, documented ${STATUS[name]}`);
    }
    expect(wrong).toEqual([]);
    expect(Object.keys(STATUS).filter((n) => !classes.has(n) && n !== 'GatehouseError')).toEqual([]);
  });

  it('a delegated token that does not verify is 401, any other delegation refusal 403', () => {
    const DelegationRejected = classes.get('DelegationRejected')!.cls as unknown as new (reason: string) => GatehouseError;
    expect(httpStatusOf(new DelegationRejected('invalid_token:ERR_JWS_INVALID'))).toBe(401);
    expect(httpStatusOf(new DelegationRejected('token_replayed'))).toBe(403);
  });

  it('names itself after its class and answers {error: {reason, message}}', () => {
    const IllegalTransition = classes.get('IllegalTransition')!.cls as unknown as new (...a: string[]) => GatehouseError;
    const illegal = new IllegalTransition('workflow', 'wf-1', 'completed', 'investigating');
    expect(illegal.name).toBe('IllegalTransition');
    expect(errorResponseOf(illegal)).toEqual({
      status: 409,
      body: { error: { reason: 'illegal_transition', message: 'workflow is completed; cannot move to investigating' } },
      headers: {},
    });
    expect(new NotFound('not_found', 'no such approval').name).toBe('NotFound');
    expect(errorResponseOf(new Unauthorized('missing_token', 'a bearer token is required'))?.status).toBe(401);
    expect(errorResponseOf(new UserError('invalid_body', 'bad', { details: [{ path: 'a', message: 'b' }] }))?.body.error).toEqual({
      reason: 'invalid_body',
      message: 'bad',
      details: [{ path: 'a', message: 'b' }],
    });
    expect(errorResponseOf(new Error('boom'))).toBeNull();
    // A dependency that cannot answer now (the token revocations unreadable, say) says when to come back.
    const unavailable = new (classes.get('DependencyUnavailable')!.cls as unknown as new (...a: string[]) => GatehouseError)(
      'postgres',
      'down',
    );
    expect(errorResponseOf(unavailable)).toMatchObject({ status: 503, headers: { 'retry-after': '5' } });
  });
});
