import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_WORLD_PATH } from '@gatehouse/contracts';
import { createServiceContext } from '../src/index.ts';

// A service reads and checks the directory before it starts anything (ADR 0766): a user id in
// two tenants stops it at once, with the id named, instead of failing its requests later.

describe('a service refuses to start on a directory it cannot use', () => {
  it('a user id listed under two tenants: createServiceContext throws naming it, before any connection', () => {
    const world = JSON.parse(readFileSync(DEFAULT_WORLD_PATH, 'utf8')) as { users: Array<Record<string, unknown>> };
    world.users.push({ ...world.users.find((u) => u.id === 'rep-ana')!, tenant: 'northwind' });
    const file = resolve(mkdtempSync(resolve(tmpdir(), 'gh-dir-')), 'world.json');
    writeFileSync(file, JSON.stringify(world));
    const start = () =>
      createServiceContext(
        'directory-probe',
        {},
        {
          GATEHOUSE_ENV: 'test',
          // Nothing listens here: a connection attempt before the check would show as an error, not this throw.
          DATABASE_URL: 'postgres://127.0.0.1:1/none',
          REDIS_URL: 'redis://127.0.0.1:1',
          QUEUE_PREFIX: 'directory-probe',
          GATEHOUSE_WORLD: file,
        },
      );
    expect(start).toThrow(/user id "rep-ana" appears more than once/);
  });
});
