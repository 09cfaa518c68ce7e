import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatStackStatus, lastErrorIn, statusRecorder, type StackStatusReport } from '../src/stack-control.ts';

// `stack status` showed a crash-looping service's exit code alone ("last exit code 1"); the cause
// (a port already in use, say) was only in the service's log (found by an on-call pass, helper-120).
// The status now carries the last error the log held at the exit.

const dir = (): string => mkdtempSync(resolve(tmpdir(), 'gh-status-'));

const UNCAUGHT = [
  '{"level":30,"time":1,"msg":"agent-loop starting"}',
  'file:///repo/services/agent-loop/src/main.ts:159',
  'const { server, port } = await listen(app, env.AGENT_LOOP_PORT);',
  '                         ^',
  '',
  'Error: listen EADDRINUSE: address already in use 127.0.0.1:8101',
  '    at Server.setupListenHandle [as _listen2] (node:net:1940:16)',
  '    at listenInCluster (node:net:1997:12) {',
  "  code: 'EADDRINUSE',",
  '}',
  '',
  'Node.js v24.11.1',
].join('\n');

describe('lastErrorIn', () => {
  it('finds the uncaught error Node printed last', () => {
    const d = dir();
    writeFileSync(resolve(d, 'agent-loop.log'), UNCAUGHT);
    expect(lastErrorIn(resolve(d, 'agent-loop.log'))).toBe('Error: listen EADDRINUSE: address already in use 127.0.0.1:8101');
  });

  it('finds a JSON line at error or fatal level (its msg and err message), not one below', () => {
    const d = dir();
    const lines = [
      '{"level":50,"msg":"older failure"}',
      '{"level":60,"msg":"refusing to start","err":{"message":"no delegation JWKS at /x"}}',
      '{"level":40,"msg":"a warning after it"}',
    ];
    writeFileSync(resolve(d, 'executor.log'), lines.join('\n'));
    expect(lastErrorIn(resolve(d, 'executor.log'))).toBe('refusing to start: no delegation JWKS at /x');
  });

  it('bounds what it returns, and is undefined for no error or no file', () => {
    const d = dir();
    writeFileSync(resolve(d, 'a.log'), `Error: ${'x'.repeat(1000)}`);
    expect(lastErrorIn(resolve(d, 'a.log'))!.length).toBe(240);
    writeFileSync(resolve(d, 'b.log'), '{"level":30,"msg":"fine"}\n');
    expect(lastErrorIn(resolve(d, 'b.log'))).toBeUndefined();
    expect(lastErrorIn(resolve(d, 'missing.log'))).toBeUndefined();
  });
});

describe('statusRecorder and stack status', () => {
  it('an exit records the log’s last error, and the status line shows it beside the exit code', () => {
    const d = dir();
    writeFileSync(resolve(d, 'agent-loop.log'), UNCAUGHT);
    const record = statusRecorder(d, { 'agent-loop': 8101 });
    record({ type: 'starting', service: 'agent-loop', restarts: 0 });
    record({ type: 'exited', service: 'agent-loop', code: 1, signal: null, restarts: 1, delayMs: 500 });
    record({ type: 'crash-loop', service: 'agent-loop', restarts: 5 });
    const report: StackStatusReport = {
      dir: d,
      supervisorPid: 1,
      unsupervised: [],
      services: JSON.parse(readFileSync(resolve(d, 'status.json'), 'utf8')) as StackStatusReport['services'],
    };
    const [, line] = formatStackStatus(report);
    expect(line).toMatch(
      /agent-loop +crash-looping +restarts 5, last exit code 1 at \S+ \(Error: listen EADDRINUSE: address already in use 127\.0\.0\.1:8101\)/,
    );
  });
});
