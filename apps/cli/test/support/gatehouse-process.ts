import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';

/** How a `gatehouse` process ended: its exit code (null when it was killed, e.g. at the timeout), its output and how long it took, ms. */
export interface GatehouseRun {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs the CLI (`apps/cli/src/main.ts`) as a process of this Node, in the repository, with this
 * process's environment plus `env`, killed after `timeoutMs`. Never rejects: a failing command is
 * its exit code.
 */
export function runGatehouse(args: string[], env: Record<string, string>, timeoutMs: number): Promise<GatehouseRun> {
  const started = Date.now();
  return new Promise((done) => {
    execFile(
      process.execPath,
      [resolve(repoRoot, 'apps/cli/src/main.ts'), ...args],
      { cwd: repoRoot, timeout: timeoutMs, env: { ...process.env, ...env } },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number | null }).code ?? null) : 0;
        done({ code: typeof code === 'number' ? code : null, stdout, stderr, ms: Date.now() - started });
      },
    );
  });
}
