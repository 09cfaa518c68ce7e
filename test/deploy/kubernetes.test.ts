import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queueContracts, repoRoot } from '@gatehouse/contracts';
import { renderKustomization, schemaErrors, type K8sObject } from './k8s-render.ts';
import {
  availabilityViolations,
  containerViolations,
  defaultDenyViolations,
  probeViolations,
  quantity,
  syntheticViolations,
  workloads,
  writableTmpViolations,
} from './k8s-checks.ts';

// Offline checks of the Kubernetes manifests (docs/decisions/0160-kubernetes-manifests.md): both
// overlays render with kustomize, every object validates against the Kubernetes (and KEDA)
// schemas, and the properties the deployment relies on hold. Each property is also removed from
// a copy of deploy/k8s, and the check must then report it.

const K8S = resolve(repoRoot, 'deploy/k8s');
const SERVICES = ['agent-loop', 'policy-gateway', 'approval', 'executor', 'audit', 'ops'];
const SYNTHETIC = ['model-stub', 'staging'];
/** Peak RSS of the benchmark's latest full run, MB (README "Performance"). */
const PEAK_RSS_MB: Record<string, number> = { executor: 418, audit: 373, 'policy-gateway': 315 };
/** Objects the production overlay expects the operator to create (README "Deploying"). */
const OPERATOR_PROVIDED = [
  'ConfigMap/gatehouse-world',
  'Secret/gatehouse-secrets',
  'Secret/gatehouse-audit-key',
  'Secret/gatehouse-delegation-key',
  'Secret/gatehouse-model',
];

const rendered = {
  local: renderKustomization(join(K8S, 'overlays/local')),
  production: renderKustomization(join(K8S, 'overlays/production')),
};

/** Every property check at once, on one rendering. */
const allViolations = (objects: K8sObject[]): string[] => [
  ...containerViolations(objects),
  ...writableTmpViolations(objects),
  ...probeViolations(objects),
  ...availabilityViolations(objects),
  ...defaultDenyViolations(objects),
];

const byName = (objects: K8sObject[], kind: string, name: string): K8sObject | undefined =>
  objects.find((o) => o.kind === kind && o.metadata.name === name);

type Pod = ReturnType<typeof workloads>[number]['spec']['template']['spec'];
const podOf = (objects: K8sObject[], name: string): Pod =>
  workloads(objects).find((w) => w.kind === 'Deployment' && w.metadata.name === name)!.spec.template.spec;

/** The environment a container gets from its config maps (rendered ones only). */
function configEnv(objects: K8sObject[], pod: Pod): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of (pod.containers[0] as { envFrom?: Array<{ configMapRef?: { name: string } }> }).envFrom ?? []) {
    const cm = from.configMapRef && (byName(objects, 'ConfigMap', from.configMapRef.name) as { data?: Record<string, string> } | undefined);
    Object.assign(env, cm?.data ?? {});
  }
  return env;
}

for (const [overlay, objects] of Object.entries(rendered)) {
  describe(`deploy/k8s/overlays/${overlay}`, () => {
    it('every rendered object validates against its Kubernetes or KEDA schema', async () => {
      expect(objects.length).toBeGreaterThan(20);
      const errors = (await Promise.all(objects.map((o) => schemaErrors(o)))).flat();
      expect(errors).toEqual([]);
    });

    it('non-root, read-only, no capabilities, seccomp, limits ≥ requests, versioned images, /tmp, probes, PDBs, scalers, default deny', () => {
      expect(allViolations(objects)).toEqual([]);
    });

    it('a Deployment per service, the migration Job, everything in namespace gatehouse', () => {
      const deployments = workloads(objects)
        .filter((w) => w.kind === 'Deployment')
        .map((d) => d.metadata.name);
      expect(deployments.sort()).toEqual((overlay === 'local' ? [...SERVICES, ...SYNTHETIC] : SERVICES).sort());
      const job = byName(objects, 'Job', 'migrate') as { spec: { template: { spec: Pod } } } | undefined;
      expect((job?.spec.template.spec.containers[0] as { command?: string[] }).command).toEqual([
        'node',
        'apps/cli/src/main.ts',
        'migrate',
      ]);
      for (const o of objects.filter((x) => x.kind !== 'Namespace'))
        expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe('gatehouse');
    });

    it('memory requests cover the benchmark peak RSS, limits leave 25 % headroom', () => {
      for (const [name, mb] of Object.entries(PEAK_RSS_MB)) {
        const r = podOf(objects, name).containers[0]!.resources!;
        expect(quantity(r.requests!.memory!), `${name} request`).toBeGreaterThanOrEqual(mb * 1e6);
        expect(quantity(r.limits!.memory!), `${name} limit`).toBeGreaterThanOrEqual(mb * 1e6 * 1.25);
      }
    });

    it('GATEHOUSE_WORLD and AUDIT_SIGNING_KEY_PATH point into the volumes that hold them', () => {
      for (const name of overlay === 'local' ? [...SERVICES, ...SYNTHETIC] : SERVICES) {
        const pod = podOf(objects, name);
        const env = configEnv(objects, pod);
        const mounts = pod.containers[0]!.volumeMounts ?? [];
        const world = mounts.find((m) => m.mountPath === dirname(env.GATEHOUSE_WORLD ?? '/missing'));
        expect(pod.volumes?.find((v) => v.name === world?.name)?.configMap?.name, `${name} world`).toBe('gatehouse-world');
      }
      const audit = podOf(objects, 'audit');
      const keyMount = audit.containers[0]!.volumeMounts!.find(
        (m) => m.mountPath === dirname(configEnv(objects, audit).AUDIT_SIGNING_KEY_PATH ?? '/missing'),
      );
      const keyVolume = audit.volumes!.find((v) => v.name === keyMount?.name)!;
      // Production: the operator's Secret, read-only. Local: the key the audit service makes on first start, kept on a claim.
      if (overlay === 'production') expect([keyVolume.secret?.secretName, keyMount?.readOnly]).toEqual(['gatehouse-audit-key', true]);
      else expect([keyVolume.persistentVolumeClaim?.claimName, keyMount?.readOnly]).toEqual(['audit-key', false]);
    });

    // docs/decisions/0570: production refuses the audit service without its anchor witness.
    it('AUDIT_ANCHOR_WITNESS_PATH lies on the writable gatehouse-audit-witness claim', () => {
      const audit = podOf(objects, 'audit');
      const path = configEnv(objects, audit).AUDIT_ANCHOR_WITNESS_PATH ?? '/missing';
      const mount = audit.containers[0]!.volumeMounts!.find((m) => m.mountPath === dirname(path));
      const volume = audit.volumes!.find((v) => v.name === mount?.name);
      expect([volume?.persistentVolumeClaim?.claimName, mount?.readOnly ?? false]).toEqual(['gatehouse-audit-witness', false]);
    });

    it('every ConfigMap and Secret a pod uses is rendered, or (production) one the operator creates', () => {
      const present = new Set(objects.map((o) => `${o.kind}/${o.metadata.name}`));
      const missing = new Set<string>();
      for (const w of workloads(objects)) {
        const pod = w.spec.template.spec;
        for (const v of pod.volumes ?? []) {
          if (v.configMap) missing.add(`ConfigMap/${v.configMap.name}`);
          if (v.secret) missing.add(`Secret/${v.secret.secretName}`);
        }
        for (const f of (pod.containers[0] as { envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }> })
          .envFrom ?? []) {
          if (f.configMapRef) missing.add(`ConfigMap/${f.configMapRef.name}`);
          if (f.secretRef) missing.add(`Secret/${f.secretRef.name}`);
        }
      }
      const absent = [...missing].filter((m) => !present.has(m)).sort();
      expect(absent).toEqual(overlay === 'production' ? OPERATOR_PROVIDED.sort() : []);
    });

    it('each service gets only the keys it uses: the model key reaches the agent loop alone, the delegation key the executor alone', () => {
      const holders = (secret: string): string[] =>
        workloads(objects)
          .filter((w) => {
            const pod = w.spec.template.spec;
            const envFrom = (pod.containers[0] as { envFrom?: Array<{ secretRef?: { name: string } }> }).envFrom ?? [];
            return envFrom.some((f) => f.secretRef?.name === secret) || (pod.volumes ?? []).some((v) => v.secret?.secretName === secret);
          })
          .map((w) => w.metadata.name)
          .sort();
      expect(holders('gatehouse-model')).toEqual(['agent-loop']);
      expect(holders('gatehouse-delegation-key')).toEqual(['executor']);
      // Locally the audit service makes its key on a volume claim; in production it is a Secret.
      expect(holders('gatehouse-audit-key')).toEqual(overlay === 'production' ? ['audit'] : []);
    });

    it('each queue-driven scaler reads the BullMQ wait list and prioritized set of a queue of this release', () => {
      const env = configEnv(objects, podOf(objects, 'executor'));
      // Every workflow job has a tenant-fair priority (ADR 0500): its backlog is the prioritized set.
      const keysOf = (base: string) => ['wait', 'prioritized'].map((k) => `${env.QUEUE_PREFIX}:${base}.${env.GATEHOUSE_RELEASE}:${k}`);
      const lists = new Set(Object.keys(queueContracts).flatMap(keysOf));
      const want: Record<string, string[]> = {
        'agent-loop': ['turns', 'results'],
        'policy-gateway': ['proposals'],
        approval: ['approval-requests'],
        executor: ['executions'],
      };
      for (const [name, bases] of Object.entries(want)) {
        const so = byName(objects, 'ScaledObject', name) as unknown as {
          spec: { triggers: Array<{ type: string; metadata: Record<string, string> }> };
        };
        const listNames = so.spec.triggers.filter((t) => t.type === 'redis').map((t) => t.metadata.listName!);
        expect(listNames, name).toEqual(bases.flatMap(keysOf));
        for (const l of listNames) expect(lists.has(l)).toBe(true);
      }
    });

    it('ingress reaches only the served APIs; worker services accept none', () => {
      const policies = objects.filter((o) => o.kind === 'NetworkPolicy') as Array<
        K8sObject & {
          spec: {
            podSelector: {
              matchLabels?: Record<string, string>;
              matchExpressions?: Array<{ key: string; operator: string; values: string[] }>;
            };
            ingress?: Array<{ ports?: Array<{ port: number }> }>;
          };
        }
      >;
      const api: Record<string, number | undefined> = {
        'agent-loop': 7101,
        approval: 7102,
        ops: 7105,
        'policy-gateway': undefined,
        executor: undefined,
        audit: undefined,
      };
      for (const [name, port] of Object.entries(api)) {
        const labels = workloads(objects).find((w) => w.metadata.name === name)!.spec.template.metadata!.labels!;
        const selecting = policies.filter((p) => {
          const sel = p.spec.podSelector;
          return (
            Object.entries(sel.matchLabels ?? {}).every(([k, v]) => labels[k] === v) &&
            (sel.matchExpressions ?? []).every((e) => e.operator === 'In' && e.values.includes(labels[e.key] ?? ''))
          );
        });
        const rules = selecting.flatMap((p) => p.spec.ingress ?? []);
        if (port === undefined) expect(rules, name).toEqual([]);
        else
          expect(
            rules.map((r) => (r.ports ?? []).map((x) => x.port)),
            name,
          ).toEqual([[port]]);
      }
    });
  });
}

describe('the overlays differ where they must', () => {
  it('production has no synthetic service and nothing that refers to one; local has both', () => {
    expect(syntheticViolations(rendered.production)).toEqual([]);
    expect(syntheticViolations(rendered.local).length).toBeGreaterThan(0);
  });

  it('README "Deploying" names every object the operator creates, every secret key, and the migration first', () => {
    const readme = readFileSync(resolve(repoRoot, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Deploying'), readme.indexOf('\n## ', readme.indexOf('## Deploying') + 1));
    for (const o of OPERATOR_PROVIDED) expect(section).toContain(o.split('/')[1]);
    // The production secrets (packages/platform/src/env.ts refuses their local defaults), the database and the model API key.
    for (const key of [
      'DATABASE_URL',
      'GATEHOUSE_AUTH_SECRET',
      'GATEHOUSE_AUDIT_HMAC_KEY',
      'GATEHOUSE_WEBHOOK_SECRET_KEY',
      'OPENAI_API_KEY',
      'audit-ed25519.pem',
      'delegation-ed25519.pem',
    ])
      expect(section).toMatch(new RegExp(`\\| \`${key.replace('.', '\\.')}\` \\|`));
    const build = section.indexOf('kustomize build deploy/k8s/overlays/production');
    const migrate = section.indexOf('wait --for=condition=complete job/migrate');
    expect(build).toBeGreaterThan(0);
    expect(migrate).toBeGreaterThan(build);
    expect(section.indexOf('kubectl apply -f gatehouse.yaml\n')).toBeGreaterThan(migrate);
  });

  it("the local overlay's world.json is synthetic-world/world.json", () => {
    expect(readFileSync(join(K8S, 'overlays/local/world.json'), 'utf8')).toBe(
      readFileSync(resolve(repoRoot, 'synthetic-world/world.json'), 'utf8'),
    );
  });
});

// The same checks on copies of deploy/k8s with one property removed: each must be reported.
describe('a removed property is reported', () => {
  // Made when a test of this block runs (a filtered run skips the hooks and leaves nothing behind).
  let work = '';
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'gh-k8s-'));
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  /** Copies deploy/k8s, applies `edits` (file → [text, replacement]; the text must occur), renders `overlay`. */
  function renderEdited(overlay: string, edits: Record<string, Array<[string | RegExp, string]>>): K8sObject[] {
    const dir = mkdtempSync(join(work, 'k8s-'));
    cpSync(K8S, dir, { recursive: true });
    for (const [file, replacements] of Object.entries(edits)) {
      let text = readFileSync(join(dir, file), 'utf8');
      for (const [from, to] of replacements) {
        const next = text.replace(from, to);
        if (next === text) throw new Error(`${file}: ${String(from)} not found`);
        text = next;
      }
      writeFileSync(join(dir, file), text);
    }
    return renderKustomization(join(dir, 'overlays', overlay));
  }

  const cases: Array<[string, string, Record<string, Array<[string | RegExp, string]>>, string]> = [
    [
      'readOnlyRootFilesystem',
      'production',
      { 'base/hardening.yaml': [['readOnlyRootFilesystem: true', 'readOnlyRootFilesystem: false']] },
      'readOnlyRootFilesystem not true',
    ],
    [
      'drop ALL',
      'production',
      { 'base/hardening.yaml': [['capabilities: { drop: [ALL] }', 'capabilities: { drop: [NET_RAW] }']] },
      'capabilities do not drop ALL',
    ],
    ['runAsNonRoot', 'production', { 'base/hardening.yaml': [[/runAsNonRoot: true/g, 'runAsNonRoot: false']] }, 'not runAsNonRoot'],
    [
      'seccomp',
      'production',
      { 'base/hardening.yaml': [['seccompProfile: { type: RuntimeDefault }', 'seccompProfile: { type: Unconfined }']] },
      'seccomp not RuntimeDefault',
    ],
    [
      'privilege escalation',
      'local',
      { 'overlays/local/staging.yaml': [['allowPrivilegeEscalation: false', 'allowPrivilegeEscalation: true']] },
      'staging container staging: allowPrivilegeEscalation',
    ],
    [
      'readiness probe',
      'production',
      { 'base/executor.yaml': [[/ {10}readinessProbe:.*\n/, '']] },
      'executor container executor: readinessProbe is not GET /readyz',
    ],
    [
      'liveness probe',
      'production',
      { 'base/ops.yaml': [['livenessProbe: { httpGet: { path: /healthz', 'livenessProbe: { httpGet: { path: /readyz']] },
      'ops container ops: livenessProbe is not GET /healthz',
    ],
    [
      'limit below request',
      'production',
      { 'base/executor.yaml': [['memory: 768Mi', 'memory: 256Mi']] },
      'memory limit 256Mi < request 448Mi',
    ],
    [
      'memory limit',
      'production',
      { 'base/audit.yaml': [['limits: { cpu: "1", memory: 640Mi }', 'limits: { cpu: "1" }']] },
      'audit container audit: no memory limit',
    ],
    ['image :latest', 'production', { 'overlays/production/kustomization.yaml': [['newTag: 0.1.0', 'newTag: latest']] }, 'is :latest'],
    ['untagged image', 'local', { 'overlays/local/postgres.yaml': [['postgres:16.11-bookworm', 'postgres']] }, 'image postgres has no tag'],
    [
      'PodDisruptionBudget',
      'production',
      { 'base/approval.yaml': [[/---\napiVersion: policy\/v1\nkind: PodDisruptionBudget\n(.+\n)+?---\n/, '---\n']] },
      'Deployment/approval: no PodDisruptionBudget',
    ],
    [
      'scaler',
      'production',
      { 'base/executor.yaml': [['scaleTargetRef: { name: executor }', 'scaleTargetRef: { name: executor-old }']] },
      'Deployment/executor: no ScaledObject',
    ],
    [
      'default deny',
      'production',
      { 'base/network-policies.yaml': [['policyTypes: [Ingress, Egress]', 'policyTypes: [Ingress]']] },
      'no default-deny NetworkPolicy',
    ],
    [
      '/tmp emptyDir',
      'production',
      { 'base/executor.yaml': [['- { name: tmp, mountPath: /tmp }', '- { name: tmp, mountPath: /scratch }']] },
      'Deployment/executor: no emptyDir on /tmp',
    ],
    ['service-account token', 'production', { 'base/hardening.yaml': [['value: false', 'value: true']] }, 'mounts a service-account token'],
  ];
  for (const [property, overlay, edits, expected] of cases) {
    it(property, () => {
      const found = allViolations(renderEdited(overlay, edits));
      expect(
        found.some((v) => v.includes(expected)),
        `expected "${expected}" in:\n${found.join('\n')}`,
      ).toBe(true);
    });
  }

  it('a synthetic service in production', () => {
    const dir = mkdtempSync(join(work, 'k8s-'));
    cpSync(K8S, dir, { recursive: true });
    cpSync(join(dir, 'overlays/local/model-stub.yaml'), join(dir, 'overlays/production/model-stub.yaml'));
    const kustomization = join(dir, 'overlays/production/kustomization.yaml');
    writeFileSync(
      kustomization,
      readFileSync(kustomization, 'utf8').replace('  - network-policies.yaml\n', '  - network-policies.yaml\n  - model-stub.yaml\n'),
    );
    expect(syntheticViolations(renderKustomization(join(dir, 'overlays/production')))).toContain('Deployment/model-stub: is model-stub');
  });

  it('an object that breaks its schema', async () => {
    const objects = renderEdited('production', { 'base/executor.yaml': [['maxReplicaCount: 8', 'maxReplicaCount: eight']] });
    const errors = (await Promise.all(objects.map((o) => schemaErrors(o)))).flat();
    expect(errors.join('\n')).toMatch(/ScaledObject\/executor: .*maxReplicaCount/);
  });
});
