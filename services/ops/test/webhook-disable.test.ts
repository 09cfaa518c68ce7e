import { beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { inTransaction, recordWorkflowEvent } from '@gatehouse/ledger';
import { createAction } from '@gatehouse/testing';
import { opsAppFixture, SECRET } from './support/ops-app.ts';

// `DELETE /api/webhooks/:endpointId` answers the endpoint, disabled: no new deliveries, and its
// pending ones are marked `failed` (docs/product/public-contract.md#webhooks). The route only set
// `disabled_at`: the pending deliveries stayed `pending` in the listing until the delivery worker
// next claimed each of them — one per workflow at a time, and a delivery in backoff not before its
// next attempt (up to 15 min) — so on-call saw deliveries of a disabled endpoint still waiting.

const app = opsAppFixture('ops-webhook-disable-test');
let ops: string;
beforeAll(async () => {
  ops = await tokenFor('ops-gus', SECRET);
});

interface Delivery {
  endpointId: string;
  status: string;
  lastError: string | null;
  finishedAt: string | null;
}

const deliveries = async (status: string): Promise<Delivery[]> => {
  const r = await fetch(`${app.url()}/api/webhooks/deliveries?status=${status}&tenant=quillfeather`, {
    headers: { authorization: `Bearer ${ops}` },
  });
  expect(r.status).toBe(200);
  return ((await r.json()) as { deliveries: Delivery[] }).deliveries;
};

describe('disabling a webhook endpoint', () => {
  it("marks its pending deliveries failed ('endpoint disabled') at once; another endpoint's stay pending", async () => {
    const auth = { authorization: `Bearer ${ops}`, 'content-type': 'application/json' };
    const ids: string[] = [];
    for (const url of ['http://127.0.0.1:9/disabled', 'http://127.0.0.1:9/kept']) {
      const r = await fetch(`${app.url()}/api/webhooks`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ tenant: 'quillfeather', url }),
      });
      expect(r.status).toBe(201);
      ids.push(((await r.json()) as { endpointId: string }).endpointId);
    }
    const [disabled, kept] = ids as [string, string];
    const { workflowId } = await createAction(app.db(), { orderId: 'O-1002', amountCents: 1200 });
    // Two events of the run: two pending deliveries per endpoint, the second one waiting on the first.
    for (const previous of [null, 'received'] as const)
      await inTransaction(app.db(), (trx) => recordWorkflowEvent(trx, workflowId, previous));
    expect((await deliveries('pending')).length).toBe(4);

    const r = await fetch(`${app.url()}/api/webhooks/${disabled}`, { method: 'DELETE', headers: { authorization: `Bearer ${ops}` } });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { disabledAt: string | null }).disabledAt).not.toBeNull();

    const pending = await deliveries('pending');
    expect(pending.map((d) => d.endpointId)).toEqual([kept, kept]);
    const failed = await deliveries('failed');
    expect(failed.map((d) => [d.endpointId, d.lastError])).toEqual([
      [disabled, 'endpoint disabled'],
      [disabled, 'endpoint disabled'],
    ]);
    expect(failed.every((d) => d.finishedAt !== null)).toBe(true);
  });
});
