import { existsSync, mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { call, pollWorkflow, tokenFor } from '@gatehouse/cli';
import { repoRoot } from '@gatehouse/contracts';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';

const SECRET = 'local-auth-secret-change-me';
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const OUT = resolve(repoRoot, 'test-results');
const HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script> cracked item';
let s: E2EStack;
let browser: Browser;
let workflowId: string;

async function signIn(user: string): Promise<Page> {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${s.url('approval')}/inbox`);
  await page.selectOption('select[name=userId]', user);
  await page.click('button[type=submit]');
  await page.waitForURL(/\/inbox\/approvals/);
  return page;
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(`Chromium not found at ${CHROMIUM}: apt-get install chromium (./run test does it as root) or set CHROMIUM_PATH`);
  s = await startE2EStack();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  mkdirSync(OUT, { recursive: true });
  // Script the model: look up O-1002, then propose a 120.00 refund whose reason carries markup.
  await call('POST', `${s.url('model-stub')}/fixtures`, null, {
    ticketId: 'T-inbox',
    responses: [
      { type: 'function_calls', calls: [{ name: 'lookup_order', arguments: JSON.stringify({ orderId: 'O-1002' }) }] },
      {
        type: 'function_calls',
        calls: [{ name: 'issue_refund', arguments: JSON.stringify({ orderId: 'O-1002', amount: '120.00', reason: HOSTILE }) }],
      },
      { type: 'message', text: 'Refund handled.' },
    ],
  });
  const rep = await tokenFor('rep-ana', SECRET);
  const res = await call('POST', `${s.url('agent-loop')}/v1/tickets`, rep, {
    ticketId: 'T-inbox',
    text: 'Customer on order O-1002 wants a refund of $120.',
    mode: 'act',
  });
  workflowId = String(res.body.workflowId);
  await pollWorkflow(s.url('agent-loop'), rep, workflowId, (v) => v.pendingApprovals.some((p) => p.status === 'pending'));
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

describe('approver inbox in a real browser (Debian Chromium, headless)', () => {
  it('lead-fay sees the refund but no approve button (approve limit too low)', async () => {
    const page = await signIn('lead-fay');
    const card = page.locator('section.card', { hasText: 'O-1002' });
    await expect(card.textContent()).resolves.toContain('120.00');
    expect(await card.locator('button[value=approve]').count()).toBe(0);
    await expect(card.textContent()).resolves.toContain('approve_limit_too_low');
    await page.screenshot({ path: resolve(OUT, 'inbox-lead-fay.png'), fullPage: true });
  });

  it('a forged form (no CSRF token) is refused and records nothing', async () => {
    const page = await signIn('lead-eli');
    const form = page.locator('section.card form').first();
    const action = await form.getAttribute('action');
    const version = await form.locator('input[name=actionVersion]').inputValue();
    const digest = await form.locator('input[name=actionDigest]').inputValue();
    const res = await page.request.post(`${s.url('approval')}${action}`, {
      form: { decision: 'approve', actionVersion: version, actionDigest: digest, csrf: 'forged' },
    });
    expect(res.status()).toBe(403);
    const row = await s.db.db.selectFrom('approvals').select('status').where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
    expect(row.status).toBe('pending');
  });

  it('lead-eli sees the trusted fields, model text escaped, approves, and the workflow advances', async () => {
    const page = await signIn('lead-eli');
    const card = page.locator('section.card', { hasText: 'O-1002' });
    const text = await card.textContent();
    expect(text).toContain('120.00');
    expect(text).toContain('R7');
    expect(text).toContain('<script>'); // shown as text …
    expect(await page.locator('section.card img, section.card script').count()).toBe(0); // … never as markup
    expect(await page.title()).not.toBe('pwned');
    await page.screenshot({ path: resolve(OUT, 'inbox-lead-eli.png'), fullPage: true });
    await card.locator('button[value=approve]').click();
    await page.waitForURL(/done=/);
    await expect(page.locator('.flash').textContent()).resolves.toMatch(/approved/);
    const rep = await tokenFor('rep-ana', SECRET);
    const done = await pollWorkflow(s.url('agent-loop'), rep, workflowId, (v) => v.state === 'completed');
    expect(done.actions.find((a) => a.tool === 'issue_refund')?.status).toBe('succeeded');
    const refunds = (await call('GET', `${s.url('staging')}/ledger/refunds?orderId=O-1002`, null)).body.refunds as unknown[];
    expect(refunds).toHaveLength(1);
  });

  it('serves the approval API as OpenAPI generated from the zod schemas', async () => {
    const doc = await call('GET', `${s.url('approval')}/openapi.json`, null);
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe('3.1.0');
    const paths = doc.body.paths as Record<string, Record<string, { responses: Record<string, unknown> }>>;
    expect(Object.keys(paths['/v1/approvals/{id}/decision']!.post!.responses)).toEqual(
      expect.arrayContaining(['200', '403', '409', '410']),
    );
  });
});
