import type { Reporter, TestModule } from 'vitest/node';

/**
 * Prints one plain closing line, `N passed, N failed, N skipped`, after vitest's own summary,
 * so tools that read a run's last line (CI) see the counts without parsing vitest's layout.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const m of modules) {
      for (const t of m.children.allTests()) {
        const state = t.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
      if (m.state() === 'failed' && ![...m.children.allTests()].length) failed++;
    }
    process.stdout.write(`\ntests: ${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  }
}
