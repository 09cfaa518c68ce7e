import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { intakeOpenApi } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import { SECRET, startFuzzApps, type FuzzApps } from '../fuzz/support/apps.ts';

/**
 * The intake document's `GET /v1/workflows/{id}/events` against a real stream
 * (docs/product/public-contract.md#pushed-updates): the data of every event it sends validates
 * against the documented `text/event-stream` schema. A stream ended by its token's `exp` sends a
 * last `stream.closed` event whose data is `{"reason":"token_expired"}`; the document described
 * "the data of each event is one WorkflowEvent" (a strict object) and had no schema for that data,
 * so a client generated from it had no type for the event that tells it to reconnect (or that its
 * token was revoked).
 */

let f: FuzzApps;
beforeAll(async () => {
  f = await startFuzzApps();
});
afterAll(async () => {
  await f?.close();
});

/** Each event of an SSE body: its `event:` name and its parsed `data:`. */
function eventsOf(body: string): Array<{ name: string; data: unknown }> {
  return body
    .split('\n\n')
    .map((block) => block.split('\n'))
    .filter((lines) => lines.some((l) => l.startsWith('data: ')))
    .map((lines) => ({
      name: lines.find((l) => l.startsWith('event: '))?.slice(7) ?? 'message',
      data: JSON.parse(lines.find((l) => l.startsWith('data: '))!.slice(6)) as unknown,
    }));
}

/** A validator of the documented `text/event-stream` data of the stream's 200. */
function streamDataValidator() {
  const doc = intakeOpenApi();
  const op = (
    doc.paths?.['/v1/workflows/{id}/events'] as { get: { responses: Record<string, { content?: Record<string, { schema: object }> }> } }
  ).get;
  const schema = op.responses['200']?.content?.['text/event-stream']?.schema;
  expect(schema, 'the 200 documents a text/event-stream schema').toBeDefined();
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  return ajv.compile({ ...schema, components: doc.components });
}

describe('the event stream as its OpenAPI document describes it', () => {
  it('every event of a stream its token ends — workflow.updated, then stream.closed — has documented data', async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const accepted = await fetch(`${f.apps['agent-loop'].url}/v1/tickets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${rep}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ticketId: 'T-SSE-DOC', text: 'status of order O-1001?' }),
    });
    expect(accepted.status).toBe(202);
    const { workflowId } = (await accepted.json()) as { workflowId: string };
    // A token that expires in 2 s: the stream sends seq 1, then ends with stream.closed at its exp.
    const shortLived = await tokenFor('rep-ana', SECRET, 2);
    const res = await fetch(`${f.apps['agent-loop'].url}/v1/workflows/${workflowId}/events`, {
      headers: { authorization: `Bearer ${shortLived}` },
      signal: AbortSignal.timeout(15_000),
    });
    expect(res.status).toBe(200);
    const events = eventsOf(await res.text());
    expect(events.map((e) => e.name)).toEqual(['workflow.updated', 'stream.closed']);
    expect(events[1]!.data).toEqual({ reason: 'token_expired' });
    const validate = streamDataValidator();
    for (const e of events) expect(validate(e.data) ? [] : validate.errors, `${e.name}: ${JSON.stringify(e.data)}`).toEqual([]);
  });
});
