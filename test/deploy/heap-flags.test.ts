import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { SERVICE_V8_FLAGS } from '@gatehouse/cli';

// docs/decisions/0360-service-heap-settings.md: every service runs with the same V8 heap settings,
// whether the local stack starts it (SERVICE_V8_FLAGS) or the container image (NODE_OPTIONS).

/** The value of the runtime stage's last `ENV NODE_OPTIONS=…` (quotes removed). */
function imageNodeOptions(dockerfile: string): string {
  const lines = dockerfile.split('\n').filter((l) => /^ENV NODE_OPTIONS=/.test(l));
  const value = lines.at(-1)?.replace(/^ENV NODE_OPTIONS=/, '') ?? '';
  return value.replace(/^"(.*)"$/, '$1');
}

/** V8's heap limit (MB) and whether node accepts `nodeOptions` in NODE_OPTIONS (it refuses flags not allowed there). */
function heapLimitMb(nodeOptions: string): number {
  const out = execFileSync(process.execPath, ['-e', 'console.log(require("v8").getHeapStatistics().heap_size_limit)'], {
    env: { ...process.env, NODE_OPTIONS: nodeOptions },
    encoding: 'utf8',
  });
  return Number(out.trim()) / 1024 / 1024;
}

describe('service heap settings', () => {
  const dockerfile = readFileSync(resolve(repoRoot, 'deploy/Dockerfile'), 'utf8');
  const imageFlags = imageNodeOptions(dockerfile).split(/\s+/);

  it('the image starts services with the stack’s V8 flags, besides the telemetry preload', () => {
    expect(imageFlags.filter((f) => !f.startsWith('--import='))).toEqual([...SERVICE_V8_FLAGS]);
    expect(imageFlags.some((f) => f.startsWith('--import=') && f.endsWith('packages/telemetry/src/register.ts'))).toBe(true);
  });

  it('node accepts them in NODE_OPTIONS and they bound the heap (old generation 192 MB plus the young one)', () => {
    const bounded = heapLimitMb(SERVICE_V8_FLAGS.join(' '));
    expect(bounded).toBeGreaterThan(192);
    expect(bounded).toBeLessThan(230);
    // without them V8 sizes the heap from the machine's memory: far above the bound
    expect(heapLimitMb('')).toBeGreaterThan(1000);
  });

  it('a change to the image’s flags alone is caught', () => {
    const drifted = dockerfile.replace('--max-old-space-size=192', '--max-old-space-size=512');
    expect(
      imageNodeOptions(drifted)
        .split(/\s+/)
        .filter((f) => !f.startsWith('--import=')),
    ).not.toEqual([...SERVICE_V8_FLAGS]);
  });
});
