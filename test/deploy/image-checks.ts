// The properties of the container image and the compose files (docs/decisions/0161-container-image.md).
// Each check takes the file's text (or parsed compose document) and returns its violations, one
// line each, so a test can require none on the real files and the right one on an edited copy.

/** One build stage of a Dockerfile: its base (ARGs resolved), alias and instructions. */
interface Stage {
  from: string;
  alias?: string;
  instructions: Array<{ op: string; args: string }>;
}

/** Splits a Dockerfile into stages (comments dropped, continuation lines joined, global ARG defaults substituted in FROM). */
export function dockerfileStages(text: string): Stage[] {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const args: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const line of lines) {
    const [op, ...rest] = line.split(/\s+/);
    const instruction = { op: op!.toUpperCase(), args: rest.join(' ') };
    if (instruction.op === 'ARG' && stages.length === 0) {
      const [name, value] = instruction.args.split('=');
      args[name!] = value ?? '';
    } else if (instruction.op === 'FROM') {
      const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(instruction.args);
      const from = (m?.[1] ?? '').replace(/\$\{?(\w+)\}?/g, (_, n: string) => args[n] ?? '');
      stages.push({ from, alias: m?.[2], instructions: [] });
    } else stages.at(-1)?.instructions.push(instruction);
  }
  return stages;
}

const PINNED_NODE = /^node:24\.\d+\.\d+-bookworm-slim(@sha256:[0-9a-f]{64})?$/;
const isProdInstall = (run: string): boolean => /pnpm install\b[^&;]*--prod\b|pnpm deploy\b[^&;]*--prod\b/.test(run);

/**
 * deploy/Dockerfile: at least two stages; every external base a pinned node:24.x.y-bookworm-slim;
 * a build stage runs the full `pnpm install`, and the runtime stage copies node_modules from a
 * stage whose last install is production-only, copies nothing from the build context, makes the
 * audit key folder (the directory of AUDIT_SIGNING_KEY_PATH) owned by its user, and runs as a
 * user other than root.
 */
export function dockerfileViolations(text: string): string[] {
  const out: string[] = [];
  const stages = dockerfileStages(text);
  if (stages.length < 2) return [`${stages.length} stage(s): a build stage and a runtime stage are needed`];
  const aliases = new Set(stages.map((s) => s.alias).filter(Boolean));
  for (const s of stages)
    if (!aliases.has(s.from) && !PINNED_NODE.test(s.from)) out.push(`base image ${s.from} is not a pinned node:24.x.y-bookworm-slim`);
  const runs = (s: Stage): string[] => s.instructions.filter((i) => i.op === 'RUN').map((i) => i.args);
  const runtime = stages.at(-1)!;
  if (!stages.slice(0, -1).some((s) => runs(s).some((r) => /pnpm install\b/.test(r) && !isProdInstall(r))))
    out.push('no build stage runs the full pnpm install');
  if (runs(runtime).some((r) => /pnpm (install|add|deploy)\b/.test(r))) out.push('the runtime stage installs packages itself');
  const copies = runtime.instructions.filter((i) => i.op === 'COPY');
  for (const c of copies) if (!/--from=/.test(c.args)) out.push(`the runtime stage copies from the build context: COPY ${c.args}`);
  const modules = copies.find((c) => /\bnode_modules\b/.test(c.args));
  const source = stages.find((s) => s.alias && modules?.args.includes(`--from=${s.alias}`));
  const installs = source ? runs(source).filter((r) => /pnpm (install|deploy)\b/.test(r)) : [];
  if (!source || !isProdInstall(installs.at(-1) ?? ''))
    out.push('the runtime node_modules are not from a production-only install (pnpm install --prod / pnpm deploy --prod)');
  const users = runtime.instructions.filter((i) => i.op === 'USER').map((i) => i.args.split(':')[0]!);
  const user = users.at(-1);
  if (!user || user === 'root' || user === '0') out.push(`the runtime stage runs as ${user ?? 'root (no USER)'}`);
  const keyPath = runtime.instructions
    .filter((i) => i.op === 'ENV')
    .map((i) => /AUDIT_SIGNING_KEY_PATH=(\S+)/.exec(i.args)?.[1])
    .find(Boolean);
  const keyDir = keyPath?.slice(0, keyPath.lastIndexOf('/'));
  const made = keyDir && user && runs(runtime).some((r) => r.includes(keyDir) && (r.includes(`-o ${user}`) || r.includes(`chown ${user}`)));
  if (!made)
    out.push(`no writable audit key folder: the directory of AUDIT_SIGNING_KEY_PATH (${keyDir ?? 'unset'}) owned by ${user ?? 'the user'}`);
  return out;
}

/** .dockerignore: excludes the history, the local tools, installed packages, the local state (audit private key) and test output. */
export function dockerignoreViolations(text: string): string[] {
  const entries = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const norm = (e: string): string =>
    e
      .replace(/^\*\*\//, '')
      .replace(/^\//, '')
      .replace(/\/$/, '');
  const excluded = new Set(entries.filter((e) => !e.startsWith('!')).map(norm));
  const reincluded = new Set(entries.filter((e) => e.startsWith('!')).map((e) => norm(e.slice(1))));
  const out: string[] = [];
  for (const need of ['.git', '.tools', 'node_modules', '.gatehouse', 'test-results'])
    if (!excluded.has(need) || reincluded.has(need)) out.push(`.dockerignore does not exclude ${need}`);
  return out;
}

/** The parts of a compose service the checks read. */
export interface ComposeService {
  image?: string;
  profiles?: string[];
  healthcheck?: { test?: string | string[]; disable?: boolean };
  depends_on?: string[] | Record<string, { condition?: string; required?: boolean }>;
}
export interface ComposeFile {
  services: Record<string, ComposeService>;
}

/**
 * Health checks and start order: every service has a health check unless `exempt` names it (with
 * the reason) or it is a one-shot job others wait to complete; every dependency is in the long
 * form with `service_healthy` (`service_completed_successfully` for a one-shot job,
 * `service_started` only for an exempt service); every image has a tag other than latest.
 */
export function composeHealthViolations(doc: ComposeFile, exempt: Record<string, string>): string[] {
  const out: string[] = [];
  const deps = (s: ComposeService): Record<string, { condition?: string; required?: boolean }> =>
    Array.isArray(s.depends_on) ? Object.fromEntries(s.depends_on.map((d) => [d, {}])) : (s.depends_on ?? {});
  const oneShot = new Set(
    Object.values(doc.services).flatMap((s) =>
      Object.entries(deps(s))
        .filter(([, d]) => d.condition === 'service_completed_successfully')
        .map(([n]) => n),
    ),
  );
  for (const [name, s] of Object.entries(doc.services)) {
    const test = s.healthcheck?.test;
    const checked = !s.healthcheck?.disable && test !== undefined && !(Array.isArray(test) && (test.length === 0 || test[0] === 'NONE'));
    if (!checked && !(name in exempt) && !oneShot.has(name)) out.push(`${name}: no health check`);
    if (Array.isArray(s.depends_on)) out.push(`${name}: depends_on without conditions`);
    for (const [dep, d] of Object.entries(deps(s))) {
      const want = oneShot.has(dep) ? 'service_completed_successfully' : dep in exempt ? 'service_started' : 'service_healthy';
      if (d.condition !== want) out.push(`${name}: depends_on ${dep} with ${d.condition ?? 'no condition'}, not ${want}`);
    }
    if (s.image && (!/:[^:/]+$/.test(s.image) || s.image.endsWith(':latest'))) out.push(`${name}: image ${s.image} is not by version`);
  }
  return out;
}

/** The services `docker compose --profile <profile> up` starts: those without profiles and those in it. */
export function enabledServices(doc: ComposeFile, profile: string): string[] {
  return Object.entries(doc.services)
    .filter(([, s]) => !s.profiles || s.profiles.length === 0 || s.profiles.includes(profile))
    .map(([n]) => n);
}

/** Dependencies of an enabled service on a service the profile leaves out, unless marked `required: false`. */
export function profileDependencyViolations(doc: ComposeFile, profile: string): string[] {
  const enabled = new Set(enabledServices(doc, profile));
  const out: string[] = [];
  for (const name of enabled) {
    const deps = doc.services[name]!.depends_on;
    if (!deps || Array.isArray(deps)) continue;
    for (const [dep, d] of Object.entries(deps))
      if (!enabled.has(dep) && d.required !== false) out.push(`${profile}: ${name} needs ${dep}, which the profile leaves out`);
  }
  return out;
}
