import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';

/** What a `gatehouse` process ended with: its exit code and its stdout then stderr. */
export interface CliRun {
  code: number;
  out: string;
}

/**
 * Runs the `gatehouse` CLI (`apps/cli/src/main.ts`) as a process of this Node, in the repository,
 * with this process's environment plus `env` (the test's database, Redis, queue prefix, token…),
 * and at most 120 s. Never rejects: a failing command is its exit code (docs/product/public-contract.md#ops-cli).
 */
export function runCli(args: string[], env: Record<string, string>): Promise<CliRun> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [resolve(repoRoot, 'apps/cli/src/main.ts'), ...args],
      { cwd: repoRoot, timeout: 120_000, env: { ...process.env, LOG_LEVEL: 'warn', ...env } },
      (err, stdout, stderr) => done({ code: err ? Number(err.code ?? 1) : 0, out: stdout + stderr }),
    );
  });
}
