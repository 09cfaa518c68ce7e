import type { K8sObject } from './k8s-render.ts';

// The properties every rendered overlay must have (docs/decisions/0160-kubernetes-manifests.md).
// Each check returns the violations it finds, one line each, so a test can both require none on
// the real manifests and require the right one on a copy with the property removed.

interface Container {
  name: string;
  image?: string;
  ports?: Array<{ name?: string; containerPort: number }>;
  securityContext?: SecurityContext;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  volumeMounts?: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
}
interface Probe {
  httpGet?: { path: string; port: number | string };
}
interface SecurityContext {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  allowPrivilegeEscalation?: boolean;
  readOnlyRootFilesystem?: boolean;
  capabilities?: { drop?: string[]; add?: string[] };
  seccompProfile?: { type: string };
}
interface Volume {
  name: string;
  emptyDir?: object;
  configMap?: { name: string };
  secret?: { secretName: string };
  persistentVolumeClaim?: { claimName: string };
}
interface PodSpec {
  securityContext?: SecurityContext;
  containers: Container[];
  initContainers?: Container[];
  volumes?: Volume[];
}
interface Workload extends K8sObject {
  spec: { template: { metadata?: { labels?: Record<string, string> }; spec: PodSpec } };
}

const WORKLOADS = new Set(['Deployment', 'StatefulSet', 'Job', 'DaemonSet']);

/** The objects that run pods. */
export function workloads(objects: K8sObject[]): Workload[] {
  return objects.filter((o) => WORKLOADS.has(o.kind)) as Workload[];
}

/**
 * A quantity in base units: cores for CPU (`250m` → 0.25), bytes for memory (`512Mi`).
 * @throws Error on a suffix this does not know.
 */
export function quantity(q: string | number): number {
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(String(q));
  if (!m) throw new Error(`not a quantity: ${q}`);
  const units: Record<string, number> = { '': 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30 };
  const unit = units[m[2]!];
  if (unit === undefined) throw new Error(`unknown quantity suffix: ${q}`);
  return Number(m[1]) * unit;
}

/**
 * Every container of every workload: non-root (uid ≠ 0), no privilege escalation, read-only root
 * filesystem, every capability dropped, seccomp RuntimeDefault (pod or container), no
 * service-account token, CPU and memory requested and limited with limits ≥ requests, an image
 * by version (a tag other than `latest`, or a digest).
 */
export function containerViolations(objects: K8sObject[]): string[] {
  const out: string[] = [];
  for (const w of workloads(objects)) {
    const pod = w.spec.template.spec;
    const podSc = pod.securityContext ?? {};
    if ((pod as { automountServiceAccountToken?: boolean }).automountServiceAccountToken !== false)
      out.push(`${w.kind}/${w.metadata.name}: mounts a service-account token`);
    for (const c of [...pod.containers, ...(pod.initContainers ?? [])]) {
      const at = `${w.kind}/${w.metadata.name} container ${c.name}`;
      const sc = c.securityContext ?? {};
      if ((sc.runAsNonRoot ?? podSc.runAsNonRoot) !== true) out.push(`${at}: not runAsNonRoot`);
      if ((sc.runAsUser ?? podSc.runAsUser) === 0) out.push(`${at}: runs as uid 0`);
      if (sc.allowPrivilegeEscalation !== false) out.push(`${at}: allowPrivilegeEscalation not false`);
      if (sc.readOnlyRootFilesystem !== true) out.push(`${at}: readOnlyRootFilesystem not true`);
      if (!(sc.capabilities?.drop ?? []).includes('ALL')) out.push(`${at}: capabilities do not drop ALL`);
      if ((sc.capabilities?.add ?? []).length > 0) out.push(`${at}: adds capabilities`);
      if ((sc.seccompProfile ?? podSc.seccompProfile)?.type !== 'RuntimeDefault') out.push(`${at}: seccomp not RuntimeDefault`);
      out.push(...resourceViolations(at, c));
      out.push(...imageViolations(at, c.image));
    }
  }
  return out;
}

function resourceViolations(at: string, c: Container): string[] {
  const out: string[] = [];
  for (const r of ['cpu', 'memory']) {
    const req = c.resources?.requests?.[r];
    const lim = c.resources?.limits?.[r];
    if (req === undefined) out.push(`${at}: no ${r} request`);
    if (lim === undefined) out.push(`${at}: no ${r} limit`);
    if (req !== undefined && lim !== undefined && quantity(lim) < quantity(req)) out.push(`${at}: ${r} limit ${lim} < request ${req}`);
  }
  return out;
}

function imageViolations(at: string, image: string | undefined): string[] {
  if (!image) return [`${at}: no image`];
  if (image.includes('@sha256:')) return [];
  const tag = /:([^:/]+)$/.exec(image)?.[1];
  if (!tag) return [`${at}: image ${image} has no tag`];
  if (tag === 'latest') return [`${at}: image ${image} is :latest`];
  return [];
}

/** A workload with a read-only root filesystem needs a writable /tmp: an emptyDir mounted there. */
export function writableTmpViolations(objects: K8sObject[]): string[] {
  const out: string[] = [];
  for (const w of workloads(objects).filter((x) => x.metadata.labels?.['app.kubernetes.io/component'] !== 'datastore')) {
    const pod = w.spec.template.spec;
    const tmp = pod.containers[0]?.volumeMounts?.find((m) => m.mountPath === '/tmp');
    const vol = pod.volumes?.find((v) => v.name === tmp?.name);
    if (!vol?.emptyDir) out.push(`${w.kind}/${w.metadata.name}: no emptyDir on /tmp`);
  }
  return out;
}

/** Every Deployment: liveness on GET /healthz and readiness on GET /readyz, on a port it declares. */
export function probeViolations(objects: K8sObject[]): string[] {
  const out: string[] = [];
  for (const d of workloads(objects).filter((w) => w.kind === 'Deployment')) {
    for (const c of d.spec.template.spec.containers) {
      const at = `Deployment/${d.metadata.name} container ${c.name}`;
      const ports = new Set<number | string>((c.ports ?? []).flatMap((p) => [p.containerPort, ...(p.name ? [p.name] : [])]));
      for (const [probe, path] of [
        ['livenessProbe', '/healthz'],
        ['readinessProbe', '/readyz'],
      ] as const) {
        const get = c[probe]?.httpGet;
        if (get?.path !== path) out.push(`${at}: ${probe} is not GET ${path}`);
        else if (!ports.has(get.port)) out.push(`${at}: ${probe} port ${get.port} is not a container port`);
      }
    }
  }
  return out;
}

const selects = (selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

/** Every Deployment: a PodDisruptionBudget selecting its pods and a scaler (KEDA ScaledObject or HPA) targeting it. */
export function availabilityViolations(objects: K8sObject[]): string[] {
  const out: string[] = [];
  const pdbs = objects.filter((o) => o.kind === 'PodDisruptionBudget') as Array<
    K8sObject & { spec: { selector: { matchLabels?: Record<string, string> } } }
  >;
  const scalers = objects.filter((o) => o.kind === 'ScaledObject' || o.kind === 'HorizontalPodAutoscaler') as Array<
    K8sObject & { spec: { scaleTargetRef: { name: string; kind?: string } } }
  >;
  for (const d of workloads(objects).filter((w) => w.kind === 'Deployment')) {
    const labels = d.spec.template.metadata?.labels;
    if (!pdbs.some((p) => selects(p.spec.selector.matchLabels, labels))) out.push(`Deployment/${d.metadata.name}: no PodDisruptionBudget`);
    if (
      !scalers.some((s) => s.spec.scaleTargetRef.name === d.metadata.name && (s.spec.scaleTargetRef.kind ?? 'Deployment') === 'Deployment')
    )
      out.push(`Deployment/${d.metadata.name}: no ScaledObject or HorizontalPodAutoscaler`);
  }
  return out;
}

/** A NetworkPolicy that selects every pod and allows nothing, for ingress and egress. */
export function defaultDenyViolations(objects: K8sObject[]): string[] {
  const denies = objects.filter((o) => {
    if (o.kind !== 'NetworkPolicy') return false;
    const spec = o.spec as { podSelector: Record<string, unknown>; policyTypes?: string[]; ingress?: unknown[]; egress?: unknown[] };
    return (
      Object.keys(spec.podSelector).length === 0 &&
      ['Ingress', 'Egress'].every((t) => spec.policyTypes?.includes(t)) &&
      (spec.ingress ?? []).length === 0 &&
      (spec.egress ?? []).length === 0
    );
  });
  return denies.length > 0 ? [] : ['no default-deny NetworkPolicy (podSelector {}, Ingress and Egress, no rules)'];
}

/** The synthetic services (model-stub, staging), by name, label or any reference to their hosts. */
export function syntheticViolations(objects: K8sObject[]): string[] {
  const out: string[] = [];
  for (const o of objects) {
    const text = JSON.stringify(o);
    for (const s of ['model-stub', 'staging']) {
      if (o.metadata.name === s || o.metadata.labels?.['app.kubernetes.io/name'] === s) out.push(`${o.kind}/${o.metadata.name}: is ${s}`);
      else if (new RegExp(`//${s}[:/]|"${s}"`).test(text)) out.push(`${o.kind}/${o.metadata.name}: refers to ${s}`);
    }
  }
  return out;
}
