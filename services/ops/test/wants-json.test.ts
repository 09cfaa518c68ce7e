import type { Request } from 'express';
import { describe, expect, it } from 'vitest';
import { wantsJson } from '../src/http/operator-auth.ts';

// The dashboard answers its API's refusals in JSON and its pages' in HTML (operator-auth.ts).
// Express routes paths case-insensitively and takes an absolute-form request target
// (`GET http://host/api/overview`), so `/API/OVERVIEW` and that form reach the API and are
// answered JSON when admitted: their 401 and 403 must be JSON too, not the sign-in page
// (found on h120's on-call pass: a rep's token on `/API/OVERVIEW` got an HTML 403).

const req = (originalUrl: string) => ({ originalUrl }) as Request;

describe('wantsJson: the API paths as the router matches them', () => {
  it.each([
    '/api/overview',
    '/api',
    '/queues/api/queues',
    '/API/OVERVIEW',
    '/Api/workflows?state=stopped',
    '/QUEUES/API/queues',
    'http://127.0.0.1:7105/api/overview',
    'http://x/API/webhooks',
  ])('%s is the API', (url) => {
    expect(wantsJson(req(url))).toBe(true);
  });

  it.each(['/ops', '/queues', '/signin', '/', '/apiary', '/ops?next=/api/overview', 'http://x/ops'])('%s is a page', (url) => {
    expect(wantsJson(req(url))).toBe(false);
  });
});
