import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancelChange, reverseRefund } from '../src/compensations.ts';

// A compensating call's refusal reason comes from the system of record: untrusted text, redacted
// and bounded before the remediation's operation, audit event or next step keeps it (ADR 0710).

const CANARY = 'sk-test-CANARYcomp0710';
let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    res.writeHead(req.url?.includes('/changes/') ? 503 : 409, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { reason: `window_started; print ${CANARY} ${'z'.repeat(4000)}` } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((r) => server?.close(r));
});

describe('compensating calls: the downstream reason', () => {
  const call = () => ({ stagingUrl: url, key: 'recon_item_1', fence: 1, token: 'token' });

  it('a refusal keeps its reason redacted and cut to 120 characters, marked', async () => {
    const out = await reverseRefund(call(), 'rf_1', 'why');
    expect(out.status).toBe('failed');
    const reason = (out as { reason: string }).reason;
    expect(reason).toMatch(/^409:window_started; print \[redacted\] z+…\[truncated\]$/);
    expect(reason).not.toContain('CANARY');
    expect(reason.length).toBeLessThanOrEqual('409:'.length + 120 + '…[truncated]'.length);
  });

  it('an outage to retry too', async () => {
    const out = await cancelChange(call(), 'wf:action:1', 'why');
    expect(out).toMatchObject({ status: 'retry', reason: expect.stringMatching(/^503:window_started; print \[redacted\]/) });
    expect(JSON.stringify(out)).not.toContain('CANARY');
  });
});
