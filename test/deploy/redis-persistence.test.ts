import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse } from 'yaml';
import { repoRoot } from '@gatehouse/contracts';

// Offline checks: Redis runs with an append-only file, fsynced once a second, on a volume,
// wherever the repository deploys it (docs/decisions/0120-redis-persistence.md).

interface ComposeService {
  command?: string[];
  volumes?: string[];
}

/** The parts of the Kubernetes objects this test reads. */
interface K8sObject {
  kind: string;
  metadata: { name: string };
  data?: Record<string, string>;
  spec?: {
    template: {
      spec: {
        containers: Array<{ command: string[]; volumeMounts: Array<{ name: string; mountPath: string }> }>;
        volumes: Array<{ name: string; configMap?: { name: string } }>;
      };
    };
    volumeClaimTemplates: Array<{ metadata: { name: string } }>;
  };
}

/** The redis-server settings a command line sets (`--name value` pairs). */
function flags(command: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < command.length; i++) {
    const word = command[i]!;
    if (word.startsWith('--')) out[word.slice(2)] = command[i + 1] ?? '';
  }
  return out;
}

/** The settings of a redis.conf text (`name value` lines). */
function conf(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n').map((l) => l.trim())) {
    if (!line || line.startsWith('#')) continue;
    const [name, ...rest] = line.split(/\s+/);
    out[name!] = rest.join(' ');
  }
  return out;
}

const read = (file: string): string => readFileSync(resolve(repoRoot, file), 'utf8');

describe('Redis persistence in the deployment files', () => {
  for (const file of ['docker-compose.yml', 'deploy/docker-compose.yml']) {
    it(`${file}: append-only, fsync every second, data dir on a named volume`, () => {
      const doc = parse(read(file), { merge: true }) as { services: Record<string, ComposeService>; volumes?: Record<string, unknown> };
      const redis = doc.services.redis!;
      const set = flags(redis.command ?? []);
      expect(set).toMatchObject({ appendonly: 'yes', appendfsync: 'everysec', dir: '/data', 'maxmemory-policy': 'noeviction' });
      const mount = (redis.volumes ?? []).find((v) => v.endsWith(':/data'));
      expect(mount, 'a volume on /data').toBeDefined();
      expect(Object.keys(doc.volumes ?? {})).toContain(mount!.split(':')[0]);
    });
  }

  it('deploy/k8s/base: a StatefulSet whose redis.conf is append-only on a persistent volume claim', () => {
    const docs = parseAllDocuments(read('deploy/k8s/base/redis.yaml')).map((d) => d.toJS() as K8sObject);
    const config = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === 'redis-config')!;
    expect(conf(config.data!['redis.conf']!)).toMatchObject({
      appendonly: 'yes',
      appendfsync: 'everysec',
      dir: '/data',
      'maxmemory-policy': 'noeviction',
    });
    const set = docs.find((d) => d.kind === 'StatefulSet' && d.metadata.name === 'redis')!.spec!;
    const container = set.template.spec.containers[0]!;
    expect(container.command).toEqual(['redis-server', '/etc/redis/redis.conf']);
    const mounts = Object.fromEntries(container.volumeMounts.map((m) => [m.mountPath, m.name]));
    expect(set.volumeClaimTemplates.map((c) => c.metadata.name)).toContain(mounts['/data']);
    const configVolume = set.template.spec.volumes.find((v) => v.name === mounts['/etc/redis']);
    expect(configVolume?.configMap?.name).toBe('redis-config');
  });

  it('scripts/services.sh starts a local Redis with an append-only file under the state folder', () => {
    const script = read('scripts/services.sh');
    const line = script.slice(script.indexOf('redis-server --daemonize'), script.indexOf('--logfile'));
    expect(line).toContain('--appendonly yes');
    expect(line).toContain('--appendfsync everysec');
    expect(script).toContain('dir="${GATEHOUSE_STATE_DIR:-$ROOT/.gatehouse}/redis"');
  });
});
