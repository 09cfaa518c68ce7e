import { defineConfig } from 'vitest/config';

// Integration tests talk to real Postgres and Redis and spawn real service processes: each
// file makes its own database and queue prefix, so files may run in parallel (2 at a time on
// the 2-core machines this project targets).
const ALL = [
  'packages/*/test/**/*.test.ts',
  'services/*/test/**/*.test.ts',
  'synthetic/*/test/**/*.test.ts',
  'apps/*/test/**/*.test.ts',
  'migrations/test/**/*.test.ts',
  'test/**/*.test.ts',
];
/** Pure logic, no Postgres, Redis, network or child process (test/repo/workspace.test.ts checks the markers). */
const UNIT = [
  'packages/*/test/**/*.unit.test.ts',
  'services/*/test/**/*.unit.test.ts',
  'synthetic/*/test/**/*.unit.test.ts',
  'apps/*/test/**/*.unit.test.ts',
];

export default defineConfig({
  test: {
    // Two projects (docs/decisions/0300-workspace-tasks.md): `vitest run --project unit` needs
    // nothing running and takes seconds; `--project integration` is everything else.
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      { extends: true, test: { name: 'integration', include: ALL, exclude: [...UNIT, '**/node_modules/**'] } },
    ],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 180_000,
    hookTimeout: 240_000,
    reporters: ['default', './test/summary-reporter.ts'],
    // Services default to production (docs/decisions/0180-strict-production-mode.md); tests and
    // the processes they spawn run locally unless a test sets GATEHOUSE_ENV itself.
    // The abuse limits are proven by test/e2e/abuse-limits.test.ts, which sets its own; every other
    // suite (fuzz, chaos, hard cases) sends far more than a person would, so they are lifted here.
    env: {
      GATEHOUSE_ENV: process.env.GATEHOUSE_ENV ?? 'local',
      INTAKE_RATE_PER_USER: '1000000',
      INTAKE_RATE_PER_TENANT: '1000000',
      SIGNIN_RATE_PER_USER: '1000000',
      SIGNIN_RATE_PER_TENANT: '1000000',
    },
  },
});
