import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { startFuzzApps, type FuzzApps, type Surface } from './apps.ts';
import { send } from './client.ts';
import { fuzzRoute, unhandledLines } from './fuzz.ts';
import { ROUTES, runsPerRoute, seededIds } from './routes.ts';

/**
 * The fuzz suite of one surface: its apps over a fresh database seeded with a workflow and an
 * approval, then every route of the surface fuzzed (`FUZZ_RUNS` spread over all routes), then the
 * app still answers `/healthz` and logged no unhandled error.
 */
export function fuzzSurface(surface: Surface): void {
  let f: FuzzApps;
  let sent = 0;
  beforeAll(async () => {
    f = await startFuzzApps();
    const refund = await createAction(f.db.db, { orderId: 'O-1002', amountCents: 12_000 });
    seededIds.workflows.push(refund.workflowId);
    if (refund.approvalId) seededIds.approvals.push(refund.approvalId);
  });
  afterAll(async () => {
    await f?.close();
  });

  describe(`${surface}: no request answers 5xx`, () => {
    for (const route of ROUTES[surface]) {
      it(`${route.method} ${route.path} (${route.auth})`, async () => {
        sent += await fuzzRoute(f.apps[surface], route, runsPerRoute());
      });
    }

    it('still answers /healthz and logged no unhandled error', async () => {
      expect(sent).toBeGreaterThanOrEqual(ROUTES[surface].length * runsPerRoute());
      const health = await send(f.apps[surface].url, { method: 'GET', path: '/healthz' });
      expect(health.status).toBe(200);
      expect(unhandledLines(f.apps[surface])).toEqual([]);
    });
  });
}
