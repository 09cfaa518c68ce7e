#!/usr/bin/env node
// The supervisor process behind `gatehouse stack up`: started detached by the CLI, it runs the
// stack as its own children (startStack, supervised), tells the CLI over IPC how start-up goes,
// then keeps supervising until SIGTERM (`gatehouse stack down`), when it stops every service.
import { parseArgs } from 'node:util';
import { rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { portOf, SERVICES, startStack } from './stack.ts';
import { statusRecorder, type DaemonMessage } from './stack-control.ts';

const { values } = parseArgs({ options: { dir: { type: 'string' }, only: { type: 'string' } } });
if (!values.dir) throw new Error('stack-daemon needs --dir <state folder>');
const dir = values.dir;
const pidFile = resolve(dir, 'supervisor.pid');
writeFileSync(pidFile, String(process.pid));
process.once('exit', () => {
  rmSync(pidFile, { force: true });
  rmSync(resolve(dir, 'status.json'), { force: true });
});
const send = (message: DaemonMessage): void => {
  if (process.connected) process.send!(message);
};
const record = statusRecorder(dir, Object.fromEntries(SERVICES.map((s) => [s.name, portOf(s, process.env)])));
try {
  const stack = await startStack({
    env: process.env,
    dir,
    only: values.only?.split(','),
    stopOnSignals: true,
    onEvent: (event) => {
      record(event);
      send({ type: 'event', event });
    },
  });
  send({ type: 'up', ports: stack.ports });
} catch (err) {
  send({ type: 'failed', message: err instanceof Error ? err.message : String(err) });
  process.stderr.write(`stack supervisor: ${String(err)}\n`);
  process.exit(1);
}
