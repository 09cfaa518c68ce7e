import { describe, expect, it } from 'vitest';
import { nonPublicAddress, webhookUrlProblem } from '../src/index.ts';

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

  it('nonPublicAddress reads IP literals only; a name is left to the resolver', () => {
    expect(nonPublicAddress('10.0.0.1')).toBe(true);
    expect(nonPublicAddress('[::1]')).toBe(true);
    expect(nonPublicAddress('8.8.8.8')).toBe(false);
    expect(nonPublicAddress('hooks.example.com')).toBe(false);
  });
});
