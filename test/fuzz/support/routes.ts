import fc from 'fast-check';
import type { Surface } from './apps.ts';
import type { RouteSpec } from './requests.ts';

/** Ids the seeding step found (a workflow of rep-ana, its approval); read lazily by the arbitraries. */
export const seededIds: { workflows: string[]; approvals: string[] } = { workflows: [], approvals: [] };

const hex64 = fc.stringMatching(/^[0-9a-f]{64}$/);
const ticket = fc.record(
  {
    ticketId: fc.oneof(fc.stringMatching(/^[A-Za-z0-9._:-]{1,20}$/), fc.string({ maxLength: 140 })),
    text: fc.string({ minLength: 1, maxLength: 200 }),
    mode: fc.constantFrom('investigate', 'act', 'dry-run'),
    pack: fc.constantFrom('support', 'change', 'other'),
  },
  { requiredKeys: ['ticketId', 'text'] },
);
const decision = fc.record({
  decision: fc.constantFrom('approve', 'deny', 'maybe'),
  actionVersion: fc.oneof(fc.integer({ min: -2, max: 5 }), fc.double(), fc.constant(Number.MAX_SAFE_INTEGER)),
  actionDigest: fc.oneof(hex64, fc.string({ maxLength: 70 })),
  reason: fc.string({ maxLength: 600 }),
});
const formDecision = fc.record({
  csrf: fc.oneof(hex64, fc.string({ maxLength: 70 })),
  decision: fc.constantFrom('approve', 'deny', ''),
  actionVersion: fc.oneof(fc.integer().map(String), fc.string({ maxLength: 8 })),
  actionDigest: fc.oneof(hex64, fc.string({ maxLength: 70 })),
  reason: fc.string({ maxLength: 600 }),
});
const signIn = fc.record(
  {
    userId: fc.oneof(fc.constantFrom('rep-ana', 'lead-eli', 'ops-gus', 'nobody'), fc.string({ maxLength: 120 })),
    token: fc.oneof(fc.string({ maxLength: 100 }), fc.constant('x'.repeat(9_000))),
  },
  { requiredKeys: [] },
);

const webhook = fc.record(
  {
    tenant: fc.oneof(fc.constantFrom('quillfeather', 'northwind', 'nobody'), fc.string({ maxLength: 80 })),
    url: fc.oneof(
      fc.webUrl(),
      fc.constantFrom('file:///etc/passwd', 'javascript:alert(1)', 'https://user:pw@example.com/x', 'http://127.0.0.1:9/#f'),
      fc.string({ maxLength: 2100 }),
    ),
  },
  { requiredKeys: [] },
);

/** `Last-Event-ID` as an EventSource resends it, and as it should not: negative, huge, padded, hex, float, text. */
const lastEventId = fc.oneof(
  { weight: 1, arbitrary: fc.constant<Record<string, string>>({}) },
  {
    weight: 3,
    arbitrary: fc.record({
      'last-event-id': fc.oneof(
        fc.nat({ max: 50 }).map(String),
        fc.constantFrom('-1', '1e3', '0x10', ' 7 ', '', 'NaN', '9'.repeat(30), '1.5', '+3'),
        fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 30 }),
      ),
    }),
  },
);

/** Who calls the approval service's routes: three leads (two regions' worth of authority, another tenant's) and a rep. */
const APPROVAL_CALLERS = ['lead-eli', 'lead-fay', 'lead-jon', 'rep-ana'];

/** Every route of the three public surfaces (plus an unknown one each), as the fuzzer drives them. */
export const ROUTES: Record<Surface, RouteSpec[]> = {
  'agent-loop': [
    { method: 'POST', path: '/v1/tickets', callers: ['rep-ana', 'rep-ivy', 'lead-eli'], auth: 'bearer', body: ticket },
    {
      method: 'GET',
      path: '/v1/workflows/:id',
      callers: ['rep-ana', 'rep-ivy', 'lead-eli'],
      auth: 'bearer',
      ids: () => seededIds.workflows,
    },
    {
      method: 'POST',
      path: '/v1/workflows/:id/messages',
      callers: ['rep-ana', 'rep-ivy', 'lead-eli'],
      auth: 'bearer',
      body: fc.record({ text: fc.string({ maxLength: 200 }) }),
      ids: () => seededIds.workflows,
    },
    {
      method: 'GET',
      path: '/v1/workflows/:id/events',
      callers: ['rep-ana', 'rep-ivy', 'lead-eli'],
      auth: 'bearer',
      ids: () => seededIds.workflows,
      headers: lastEventId,
    },
    { method: 'GET', path: '/healthz', callers: ['rep-ana', 'rep-ivy', 'lead-eli'], auth: 'bearer' },
    { method: 'GET', path: '/:id/*', callers: ['rep-ana', 'rep-ivy', 'lead-eli'], auth: 'bearer' },
  ],
  approval: [
    { method: 'GET', path: '/v1/approvals', callers: APPROVAL_CALLERS, auth: 'bearer' },
    {
      method: 'GET',
      path: '/v1/approvals/:id',
      callers: APPROVAL_CALLERS,
      auth: 'bearer',
      ids: () => seededIds.approvals,
    },
    {
      method: 'POST',
      path: '/v1/approvals/:id/decision',
      callers: APPROVAL_CALLERS,
      auth: 'bearer',
      body: decision,
      ids: () => seededIds.approvals,
    },
    { method: 'GET', path: '/inbox', callers: APPROVAL_CALLERS, auth: 'cookie:gh_inbox' },
    {
      method: 'POST',
      path: '/inbox/session',
      callers: APPROVAL_CALLERS,
      auth: 'cookie:gh_inbox',
      form: signIn,
    },
    { method: 'GET', path: '/inbox/approvals', callers: APPROVAL_CALLERS, auth: 'cookie:gh_inbox' },
    {
      method: 'POST',
      path: '/inbox/approvals/:id/decision',
      callers: APPROVAL_CALLERS,
      auth: 'cookie:gh_inbox',
      form: formDecision,
      ids: () => seededIds.approvals,
    },
    { method: 'GET', path: '/inbox/signout', callers: APPROVAL_CALLERS, auth: 'cookie:gh_inbox' },
    { method: 'GET', path: '/openapi.json', callers: APPROVAL_CALLERS, auth: 'bearer' },
    { method: 'GET', path: '/:id/*', callers: APPROVAL_CALLERS, auth: 'bearer' },
  ],
  ops: [
    { method: 'GET', path: '/ops', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/overview', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/workflows', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/operations/failed-unknown', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/reconciliation/worklist', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/queues', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/webhooks', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'POST', path: '/api/webhooks', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops', body: webhook },
    { method: 'DELETE', path: '/api/webhooks/:id', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/api/webhooks/deliveries', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/signin', callers: ['ops-gus', 'rep-ana'], auth: 'cookie:gh_ops' },
    { method: 'POST', path: '/session', callers: ['ops-gus', 'rep-ana'], auth: 'cookie:gh_ops', form: signIn },
    { method: 'GET', path: '/queues/api/queues/:id/:id', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/queues/:id', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
    { method: 'GET', path: '/:id/*', callers: ['ops-gus', 'rep-ana'], auth: 'bearer-or-cookie:gh_ops' },
  ],
};

/** Every route of every surface. */
const ROUTE_COUNT = Object.values(ROUTES).reduce((n, r) => n + r.length, 0);

/**
 * Requests per route: `FUZZ_RUNS` (total across all surfaces, default 10,000) spread evenly over
 * every route, at least 1.
 */
export function runsPerRoute(): number {
  const total = Number(process.env.FUZZ_RUNS ?? 10_000);
  if (!Number.isFinite(total) || total < 1) throw new Error(`FUZZ_RUNS must be a positive number, got ${process.env.FUZZ_RUNS}`);
  return Math.max(1, Math.ceil(total / ROUTE_COUNT));
}
