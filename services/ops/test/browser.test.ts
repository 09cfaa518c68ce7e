import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { repoRoot } from '@gatehouse/contracts';
import { startStack, type RunningStack } from '@gatehouse/cli';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, freePort, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const OUT = resolve(repoRoot, 'test-results');
const HOSTILE = `<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>`;

let t: TestDatabase;
let prefix: string;
let stack: RunningStack;
let url: string;
let browser: Browser;
let unknownKey: string;
let jobId: string;

async function signIn(user: string): Promise<Page> {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${url}/ops`);
  await page.selectOption('select[name=userId]', user);
  await page.click('button[type=submit]');
  await page.waitForLoadState();
  return page;
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(`Chromium not found at ${CHROMIUM}: apt-get install chromium (./run test does it as root) or set CHROMIUM_PATH`);
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  const a = await createAction(t.db, { orderId: 'O-1002', tool: 'reship_order' });
  unknownKey = a.operationKey;
  jobId = a.jobId;
  await t.db.updateTable('workflows').set({ state: 'needs_reconciliation' }).where('id', '=', a.workflowId).execute();
  await t.db
    .insertInto('operations')
    .values({
      key: a.operationKey,
      workflow_id: a.workflowId,
      action_id: a.actionId,
      action_digest: a.digest,
      tool: 'reship_order',
      status: 'failed_unknown',
      attempts: 1,
      error: HOSTILE,
      release_id: 'rel-1',
    })
    .execute();
  const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  const q = new Queue('executions.rel-1', { connection: redis, prefix });
  await q.add('execute', { ...a.job, note: HOSTILE }, { jobId: a.jobId, delay: 3_600_000 });
  await q.close();
  redis.disconnect();
  const port = await freePort();
  stack = await startStack({
    env: {
      DATABASE_URL: t.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: prefix,
      OPS_PORT: String(port),
      GATEHOUSE_ENV: 'test',
      LOG_LEVEL: 'warn',
    },
    dir: mkdtempSync(resolve(tmpdir(), 'gh-ops-browser-')),
    only: ['ops'],
  });
  url = `http://127.0.0.1:${port}`;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  mkdirSync(OUT, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await stack?.stop();
  if (prefix) await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

describe('ops dashboard in a real browser (Debian Chromium, headless)', () => {
  it('a rep who signs in is refused', async () => {
    const page = await signIn('rep-ana');
    await expect(page.textContent('body')).resolves.toContain('rep-ana is not an operator');
    expect(await page.context().cookies()).toEqual([]);
  });

  it('ops-gus sees the overview (stored markup shown as text) and bull-board with the release queues', async () => {
    const page = await signIn('ops-gus');
    expect(new URL(page.url()).pathname).toBe('/ops');
    const unknown = page.locator('#failed-unknown');
    await expect(unknown.textContent()).resolves.toContain(unknownKey);
    await expect(unknown.textContent()).resolves.toContain(HOSTILE);
    expect(await page.title()).toBe('Gatehouse operations');
    await page.screenshot({ path: resolve(OUT, 'ops-overview.png'), fullPage: true });

    await page.click('a[href="/queues"]');
    await page.getByText('executions.rel-1').first().waitFor({ timeout: 15_000 });
    await expect(page.textContent('body')).resolves.toContain('approval-requests.rel-1');
    await page.screenshot({ path: resolve(OUT, 'ops-queues.png'), fullPage: true });
    await page.goto(`${url}/queues/queue/${encodeURIComponent('executions.rel-1')}?status=delayed`);
    // The delayed job's data (with markup in it) is rendered by bull-board as text, never run.
    await page.getByText(jobId).first().waitFor({ timeout: 15_000 });
    await page.screenshot({ path: resolve(OUT, 'ops-queue-executions.png'), fullPage: true });
    expect(await page.title()).not.toBe('pwned');
  });
});
