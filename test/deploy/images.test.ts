import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot } from '@gatehouse/contracts';
import {
  composeHealthViolations,
  dockerfileViolations,
  dockerignoreViolations,
  enabledServices,
  profileDependencyViolations,
  type ComposeFile,
} from './image-checks.ts';

// Offline checks of the image and compose files (docs/decisions/0161-container-image.md): no
// Docker engine runs here, so the files themselves are read. Each property is also removed from
// a copy of the text, and the check must then report it.

const read = (file: string): string => readFileSync(resolve(repoRoot, file), 'utf8');
const compose = (text: string): ComposeFile => parse(text, { merge: true }) as ComposeFile;

/** Containers whose images cannot run a health check (no shell, no HTTP client); nothing waits on them being healthy. */
const TELEMETRY_EXEMPT = {
  'otel-collector': 'distroless image: no shell or HTTP client',
  jaeger: 'image without a shell or HTTP client',
};
const SERVICE_PORTS: Record<string, number> = {
  'agent-loop': 7101,
  approval: 7102,
  'model-stub': 7103,
  staging: 7104,
  ops: 7105,
  'policy-gateway': 7111,
  executor: 7112,
  audit: 7113,
};
const SYNTHETIC = ['model-stub', 'staging'];
const GATEHOUSE = ['agent-loop', 'policy-gateway', 'approval', 'executor', 'audit', 'ops', 'migrate'];

/** Replaces `from` (which must occur) in `text`. */
function edit(text: string, from: string | RegExp, to: string): string {
  const next = text.replace(from, to);
  if (next === text) throw new Error(`${String(from)} not found`);
  return next;
}

describe('deploy/Dockerfile and .dockerignore', () => {
  const dockerfile = read('deploy/Dockerfile');
  const ignore = read('.dockerignore');

  it('multi-stage, pinned node:24 slim base, production dependencies only, non-root, a writable key folder', () => {
    expect(dockerfileViolations(dockerfile)).toEqual([]);
  });

  it('.dockerignore keeps .git, .tools, node_modules, .gatehouse/ and test output out of the build context', () => {
    expect(dockerignoreViolations(ignore)).toEqual([]);
  });

  const removed: Array<[string, string | RegExp, string, string]> = [
    [
      'an unpinned base',
      'ARG NODE_IMAGE=node:24.21.0-bookworm-slim',
      'ARG NODE_IMAGE=node:24-slim',
      'is not a pinned node:24.x.y-bookworm-slim',
    ],
    ['the runtime stage', /FROM \$\{NODE_IMAGE\} AS runtime/, 'RUN true', 'a build stage and a runtime stage are needed'],
    ['the production-only install', '--offline --prod', '--offline', 'not from a production-only install'],
    ['the non-root user', 'USER node', 'USER root', 'the runtime stage runs as root'],
    ['any USER', /\nUSER node\n/, '\n', 'runs as root (no USER)'],
    ['the key folder', /RUN install -d -o node .*\n/, '', 'no writable audit key folder'],
    ['sources only from the build stage', 'COPY --from=build /src/packages ./packages', 'COPY . .', 'copies from the build context'],
  ];
  for (const [what, from, to, expected] of removed) {
    it(`reports ${what}`, () => {
      expect(dockerfileViolations(edit(dockerfile, from, to)).join('\n')).toContain(expected);
    });
  }

  for (const entry of ['.git', '.tools', '**/node_modules', '.gatehouse/', 'test-results/']) {
    it(`reports .dockerignore without ${entry}`, () => {
      const without = ignore
        .split('\n')
        .filter((l) => l.trim() !== entry && l.trim() !== `**/${entry}`)
        .join('\n');
      expect(dockerignoreViolations(without).join('\n')).toContain(`does not exclude ${entry.replace('**/', '').replace(/\/$/, '')}`);
    });
  }
});

describe('compose files', () => {
  const full = read('deploy/docker-compose.yml');
  const doc = compose(full);

  it('deploy/docker-compose.yml: a health check on every service, start order on health (or completion)', () => {
    expect(composeHealthViolations(doc, TELEMETRY_EXEMPT)).toEqual([]);
  });

  it("each Gatehouse service's health check is its own /readyz", () => {
    for (const [name, port] of Object.entries(SERVICE_PORTS)) {
      expect(JSON.stringify(doc.services[name]!.healthcheck?.test), name).toContain(`127.0.0.1:${port}/readyz`);
    }
  });

  it('profile production: every Gatehouse service without the synthetic ones; profile local: the demo with them', () => {
    const production = enabledServices(doc, 'production');
    const local = enabledServices(doc, 'local');
    expect(production).toEqual(expect.arrayContaining([...GATEHOUSE, 'postgres', 'redis']));
    for (const s of SYNTHETIC) expect(production).not.toContain(s);
    expect(local).toEqual(expect.arrayContaining([...GATEHOUSE, ...SYNTHETIC, 'postgres', 'redis']));
    expect([...profileDependencyViolations(doc, 'production'), ...profileDependencyViolations(doc, 'local')]).toEqual([]);
  });

  it('docker-compose.yml (Postgres and Redis for local development): health checks and start order', () => {
    expect(composeHealthViolations(compose(read('docker-compose.yml')), TELEMETRY_EXEMPT)).toEqual([]);
  });

  const removed: Array<[string, (t: string) => string, (d: ComposeFile) => string[], string]> = [
    [
      'a missing health check',
      (t) => edit(t, /( {2}ops:\n(?:.+\n)*?) {4}healthcheck: .*\n/, '$1'),
      (d) => composeHealthViolations(d, TELEMETRY_EXEMPT),
      'ops: no health check',
    ],
    [
      'a dependency on a started (not healthy) service',
      (t) => edit(t, 'audit: { condition: service_healthy }', 'audit: { condition: service_started }'),
      (d) => composeHealthViolations(d, TELEMETRY_EXEMPT),
      'executor: depends_on audit with service_started, not service_healthy',
    ],
    [
      'a short depends_on',
      (t) => edit(t, 'depends_on: { jaeger: { condition: service_started } }', 'depends_on: [jaeger]'),
      (d) => composeHealthViolations(d, TELEMETRY_EXEMPT),
      'otel-collector: depends_on without conditions',
    ],
    [
      'an image by :latest',
      (t) => edit(t, 'redis:7.4.7-bookworm', 'redis:latest'),
      (d) => composeHealthViolations(d, TELEMETRY_EXEMPT),
      'redis: image redis:latest is not by version',
    ],
    [
      'a synthetic service in every profile',
      (t) => edit(t, /( {2}staging:\n {4}<<: \*service\n) {4}profiles: \[local\]\n/, '$1'),
      (d) => enabledServices(d, 'production'),
      'staging',
    ],
    [
      'a required dependency on a synthetic service',
      (t) => edit(t, 'model-stub: { condition: service_healthy, required: false }', 'model-stub: { condition: service_healthy }'),
      (d) => profileDependencyViolations(d, 'production'),
      'production: agent-loop needs model-stub',
    ],
  ];
  for (const [what, change, check, expected] of removed) {
    it(`reports ${what}`, () => {
      expect(check(compose(change(full))).join('\n')).toContain(expected);
    });
  }
});
