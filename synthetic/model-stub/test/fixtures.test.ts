import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import request from 'supertest';
import type { ResponseFunctionToolCall, ResponseInputItem } from 'openai/resources/responses/responses';
import { SUPPORT_TOOLS, startHarness, type Harness } from './stub-harness.ts';

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h.close();
});
beforeEach(async () => {
  await request(h.server).delete('/fixtures').expect(200);
  await request(h.server).delete('/requests').expect(200);
});

const meta = (ticketId: string) => ({ workflow_id: `wf-${ticketId}`, ticket_id: ticketId, release: 'rel-1' });
const ask = (ticketId: string, input: string | ResponseInputItem[] = 'Refund $10 on O-1001') =>
  h.client.responses.create({ model: 'm', input, tools: SUPPORT_TOOLS, metadata: meta(ticketId) });
const fnCalls = (r: { output: Array<{ type: string }> }) =>
  r.output.filter((o): o is ResponseFunctionToolCall => o.type === 'function_call');

async function script(body: object): Promise<void> {
  await request(h.server).post('/fixtures').send(body).expect(201);
}

describe('fixture mode', () => {
  it('sends malformed arguments verbatim, then the planner takes over', async () => {
    await script({
      ticketId: 'F-1',
      responses: [{ type: 'function_calls', calls: [{ name: 'issue_refund', arguments: '{"orderId": "O-1001", amount: 12' }] }],
    });
    const r1 = await ask('F-1');
    expect(fnCalls(r1).map((c) => [c.name, c.arguments])).toEqual([['issue_refund', '{"orderId": "O-1001", amount: 12']]);
    const r2 = await ask('F-1');
    expect(fnCalls(r2).map((c) => c.name)).toEqual(['lookup_order']);
  });

  it('two parallel calls in one response, distinct call ids; appends across POSTs', async () => {
    await script({
      ticketId: 'F-2',
      responses: [
        {
          type: 'function_calls',
          calls: [
            { name: 'lookup_order', arguments: '{"orderId":"O-1001"}' },
            { name: 'unknown_tool', arguments: '{}' },
          ],
        },
      ],
    });
    await script({
      ticketId: 'F-2',
      responses: [
        { type: 'message', text: 'done' },
        { type: 'refusal', text: 'I will not.' },
      ],
    });
    const r1 = await ask('F-2');
    const calls = fnCalls(r1);
    expect(calls.map((c) => c.name)).toEqual(['lookup_order', 'unknown_tool']);
    expect(new Set(calls.map((c) => c.call_id)).size).toBe(2);
    const answered: ResponseInputItem[] = [
      { role: 'user', content: 'x' },
      ...calls.flatMap((c): ResponseInputItem[] => [
        { type: 'function_call', call_id: c.call_id, name: c.name, arguments: c.arguments },
        { type: 'function_call_output', call_id: c.call_id, output: '{}' },
      ]),
    ];
    expect((await ask('F-2', answered)).output_text).toBe('done');
    const refusal = await ask('F-2', answered);
    expect(refusal.output).toMatchObject([{ type: 'message', content: [{ type: 'refusal', refusal: 'I will not.' }] }]);
    expect(refusal.output_text).toBe('');
  });

  it('the pairing check runs before a fixture is consumed', async () => {
    await script({ ticketId: 'F-3', responses: [{ type: 'message', text: 'scripted' }] });
    const err = await ask('F-3', [{ type: 'function_call', call_id: 'call_1', name: 'lookup_order', arguments: '{}' }]).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((await ask('F-3')).output_text).toBe('scripted');
  });

  it('429 with retry-after-ms: 0 then success: the client retries transparently', async () => {
    await script({
      ticketId: 'F-4',
      responses: [
        { type: 'error', status: 429, headers: { 'retry-after-ms': '0' } },
        { type: 'message', text: 'after retry' },
      ],
    });
    const r = await ask('F-4');
    expect(r.output_text).toBe('after retry');
    const log = (await request(h.server).get('/requests?ticketId=F-4').expect(200)).body;
    expect(log.requests.map((x: { status: number; retryCount: number }) => [x.status, x.retryCount])).toEqual([
      [429, 0],
      [200, 1],
    ]);
  });

  it('500 with x-should-retry: false → InternalServerError, no retry; custom body and headers pass through', async () => {
    await script({ ticketId: 'F-5', responses: [{ type: 'error', status: 500, headers: { 'x-should-retry': 'false' } }] });
    const err = await ask('F-5').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'server_error' });
    expect((await request(h.server).get('/requests?ticketId=F-5')).body.requests).toHaveLength(1);

    await script({
      ticketId: 'F-5',
      responses: [
        {
          type: 'error',
          status: 503,
          body: { error: { message: 'overloaded', type: 'server_error', param: null, code: 'x' } },
          headers: { 'x-should-retry': 'false' },
        },
      ],
    });
    const err2 = (await ask('F-5').catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(err2.status).toBe(503);
    expect(err2.message).toBe('503 overloaded');
  });

  it('repeat mode returns the same call forever, each with a fresh call_id', async () => {
    await script({
      ticketId: 'F-6',
      repeat: true,
      responses: [{ type: 'function_calls', calls: [{ name: 'lookup_order', arguments: '{"orderId":"O-1001"}' }] }],
    });
    const input: ResponseInputItem[] = [{ role: 'user', content: 'loop' }];
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++) {
      const [c] = fnCalls(await ask('F-6', input));
      expect(c?.name).toBe('lookup_order');
      ids.add(c!.call_id);
      input.push({ type: 'function_call', call_id: c!.call_id, name: c!.name, arguments: c!.arguments });
      input.push({ type: 'function_call_output', call_id: c!.call_id, output: '{}' });
    }
    expect(ids.size).toBe(5);
  });

  it('a call names its own call_id when given one (a server that repeats them), a fresh one otherwise', async () => {
    await script({
      ticketId: 'F-7',
      responses: [
        {
          type: 'function_calls',
          calls: [
            { name: 'lookup_order', arguments: '{"orderId":"O-1001"}', call_id: 'call_0' },
            { name: 'lookup_order', arguments: '{"orderId":"O-1002"}', call_id: 'call_0' },
            { name: 'lookup_order', arguments: '{"orderId":"O-1003"}' },
          ],
        },
      ],
    });
    const ids = fnCalls(await ask('F-7')).map((c) => c.call_id);
    expect(ids.slice(0, 2)).toEqual(['call_0', 'call_0']);
    expect(ids[2]).toMatch(/^call_[0-9a-f]{24}$/);
  });

  it('rejects a bad fixture body with a reason; DELETE ?ticketId= clears one ticket', async () => {
    const bad = await request(h.server)
      .post('/fixtures')
      .send({ ticketId: 'F-7', responses: [{ type: 'nope' }] })
      .expect(400);
    expect(bad.body.error.reason).toBe('invalid_body');
    await request(h.server).post('/fixtures').send({ ticketId: 'F-7', repeat: true, responses: [] }).expect(400);
    await script({ ticketId: 'F-7', responses: [{ type: 'message', text: 'a' }] });
    await script({ ticketId: 'F-8', responses: [{ type: 'message', text: 'b' }] });
    expect((await request(h.server).delete('/fixtures?ticketId=F-7').expect(200)).body).toEqual({ cleared: 1 });
    expect(Object.keys((await request(h.server).get('/fixtures').expect(200)).body.fixtures)).toEqual(['F-8']);
  });
});

describe('HTTP edges', () => {
  it('401 invalid_api_key without a bearer key', async () => {
    const res = await request(h.server).post('/v1/responses').send({ model: 'm', input: 'hi' }).expect(401);
    expect(res.headers['content-type']).toMatch(/application\/json/);
    expect(res.headers['x-request-id']).toMatch(/^req_/);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', param: null, code: 'invalid_api_key' });
    await request(h.server).post('/v1/responses').set('authorization', 'Bearer ').send({ model: 'm', input: 'hi' }).expect(401);
  });

  it('400 in the API error shape for a missing model, bad JSON and previous_response_id', async () => {
    const auth = { authorization: 'Bearer t' };
    const missing = await request(h.server).post('/v1/responses').set(auth).send({ input: 'hi' }).expect(400);
    expect(missing.body).toEqual({
      error: {
        message: "Missing required parameter: 'model'.",
        type: 'invalid_request_error',
        param: 'model',
        code: 'missing_required_parameter',
      },
    });
    const badItem = await request(h.server)
      .post('/v1/responses')
      .set(auth)
      .send({ model: 'm', input: [{ type: 'function_call_output', output: 'x' }] })
      .expect(400);
    expect(badItem.body.error.param).toBe('input[0].call_id');
    const json = await request(h.server)
      .post('/v1/responses')
      .set(auth)
      .set('content-type', 'application/json')
      .send('{"model":')
      .expect(400);
    expect(json.body.error.type).toBe('invalid_request_error');
    const prev = await request(h.server)
      .post('/v1/responses')
      .set(auth)
      .send({ model: 'm', input: 'hi', previous_response_id: 'resp_1' })
      .expect(400);
    expect(prev.body.error).toMatchObject({ param: 'previous_response_id', code: 'previous_response_not_found' });
  });

  it('healthz and readyz', async () => {
    await request(h.server).get('/healthz').expect(200);
    expect((await request(h.server).get('/readyz').expect(200)).body).toMatchObject({ ready: true });
  });
});
