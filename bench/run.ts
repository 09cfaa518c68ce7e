// `./run bench` (and `./run bench --smoke` / BENCH_SMOKE=1): runs every benchmark, prints the
// tables and writes bench/results/latest.json (smoke: bench/results/smoke.json).
// BENCH_SECTIONS=governed,telemetry,scaling,isolation,replay,e2e,policy picks sections (the floor always runs);
// BENCH_SIZES='{"replayActions":200}' overrides sizes of bench/config.ts.
// BENCH_READY_TIMEOUT_MS: how long each service may take to boot (default 90 000).
// BENCH_NODE_OPTIONS: node flags added to every service process (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`).
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runBench } from './bench.ts';
import type { BenchSizes } from './config.ts';
import { renderReport } from './render.ts';

const smoke = process.env.BENCH_SMOKE === '1' || process.argv.includes('--smoke');
const sections = process.env.BENCH_SECTIONS?.split(',').map((s) => s.trim());
const sizes = process.env.BENCH_SIZES ? (JSON.parse(process.env.BENCH_SIZES) as Partial<BenchSizes>) : undefined;
const dir = fileURLToPath(new URL('./results/', import.meta.url));
try {
  const report = await runBench({ smoke, sections, sizes, handleSignals: true });
  mkdirSync(dir, { recursive: true });
  const file = `${dir}${smoke ? 'smoke' : 'latest'}.json`;
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  process.stdout.write(renderReport(report));
  process.stdout.write(`\nwritten: ${file}\n`);
  process.exit(Object.keys(report.errors).length ? 1 : 0);
} catch (err) {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
}
