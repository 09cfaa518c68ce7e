import { describe, expect, it } from 'vitest';
import { nonPublicAddress, normalizedWebhookUrl, shownWebhookUrl, webhookUrlProblem } from '../src/index.ts';

// A tenant's webhook URL is checked at registration and before every delivery
// (docs/decisions/0671-webhooks-reach-public-hosts-only.md): in production it may not point at
// this machine or a private network, which a webhook would otherwise let a tenant's operator reach.

describe('webhook URLs', () => {
  it.each([
    'https://127.0.0.1/hook',
    'https://2130706433/hook', // 127.0.0.1 written as one number
    'https://0x7f.1/hook',
    'https://localhost:8443/hook',
    'https://ops.localhost/hook',
    'https://10.1.2.3/hook',
    'https://172.20.0.5/hook',
    'https://192.168.1.10/hook',
    'https://169.254.169.254/latest/meta-data', // a cloud metadata service
    'https://100.64.0.1/hook',
    'https://0.0.0.0/hook',
    'https://[::1]/hook',
    'https://[::ffff:127.0.0.1]/hook',
    'https://[fd00::1]/hook',
    'https://[fe80::1]/hook',
    'https://localhost./hook',
    'https://[64:ff9b::a9fe:a9fe]/hook', // NAT64 of 169.254.169.254
    'https://[2002:a9fe:a9fe::1]/hook', // 6to4 of the same
    'https://198.18.0.1/hook',
  ])('production refuses %s: not a public host', (url) => {
    expect(webhookUrlProblem(url, true)).toMatch(/^production delivers to public hosts only/);
    expect(webhookUrlProblem(url.replace('https:', 'http:'), false)).toBeNull(); // local and test stacks may
  });

  it('production accepts a public https host, by name or address', () => {
    expect(webhookUrlProblem('https://hooks.example.com/gatehouse', true)).toBeNull();
    expect(webhookUrlProblem('https://93.184.216.34/hook', true)).toBeNull();
    expect(webhookUrlProblem('https://[2606:4700::1111]/hook', true)).toBeNull();
  });

  // Port 0 is no port a receiver listens on: every attempt would fail, so registration refuses it
  // with a reason rather than accept an endpoint that can never be delivered to.
  it.each(['https://hooks.example.com:0/hook', 'http://127.0.0.1:0/hook'])('refuses port 0 in %s, in any environment', (url) => {
    expect(webhookUrlProblem(url, true)).toMatch(/port 0/);
    expect(webhookUrlProblem(url.replace('https:', 'http:'), false)).toMatch(/port 0/);
  });

  it('nonPublicAddress reads IP literals only; a name is left to the resolver', () => {
    expect(nonPublicAddress('10.0.0.1')).toBe(true);
    expect(nonPublicAddress('[::1]')).toBe(true);
    expect(nonPublicAddress('8.8.8.8')).toBe(false);
    expect(nonPublicAddress('hooks.example.com')).toBe(false);
  });
});

// ADR 0727: a URL is stored in the WHATWG parser's serialization (an internationalized host in
// ASCII), and shown without its query once registered.
describe('normalised and shown webhook URLs', () => {
  it('a unicode and a punycode spelling of one host normalise to one ASCII URL', () => {
    const ascii = 'https://xn--bcher-kva.example/in?token=t';
    expect(normalizedWebhookUrl('https://Bücher.example/in?token=t')).toBe(ascii);
    expect(normalizedWebhookUrl('https://BÜCHER.EXAMPLE:443/in?token=t')).toBe(ascii);
    expect(normalizedWebhookUrl('https://xn--bcher-kva.example/in?token=t')).toBe(ascii);
    expect(normalizedWebhookUrl('http://127.0.0.1:80/x')).toBe('http://127.0.0.1/x');
  });

  it.each(['https://ｌｏｃａｌｈｏｓｔ/hook', 'https://１２７.０.０.１/hook', 'https://127。0。0。1/hook', 'https://①②⑦.0.0.1/hook'])(
    'production judges the ASCII host of %s: refused as this machine',
    (url) => {
      expect(webhookUrlProblem(url, true)).toMatch(/^production delivers to public hosts only/);
      expect(webhookUrlProblem(normalizedWebhookUrl(url), true)).toMatch(/^production delivers to public hosts only/);
    },
  );

  it('shows scheme, ASCII host, port and path; a query only as ?[redacted]; an unparsable value not at all', () => {
    expect(shownWebhookUrl('https://xn--bcher-kva.example:8443/in?token=abc&x=1')).toBe('https://xn--bcher-kva.example:8443/in?[redacted]');
    expect(shownWebhookUrl('https://Bücher.example/in?abc')).toBe('https://xn--bcher-kva.example/in?[redacted]');
    expect(shownWebhookUrl('https://hooks.example.com/in')).toBe('https://hooks.example.com/in');
    expect(shownWebhookUrl('https://user:pw@hooks.example.com/in#f')).toBe('https://hooks.example.com/in');
    expect(shownWebhookUrl('not a url ?token=abc')).toBe('[redacted]');
  });
});
