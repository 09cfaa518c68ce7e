/**
 * Preloaded into every service process the local stack starts (apps/cli/src/stack.ts): answers the
 * supervisor's liveness ping over the IPC channel, so a process that does not listen yet — a boot
 * step waiting for Postgres (ADR 0653) — shows that it is alive, not hung (ADR 0739). A process
 * without that channel (the container image, a service started by hand) does nothing here. The
 * channel does not keep the process alive.
 */
import { LIVENESS_PING, LIVENESS_PONG } from './liveness-protocol.ts';

if (process.send && process.channel) {
  process.on('message', (m: unknown) => {
    const ping = m as { type?: string; id?: number } | null;
    if (ping?.type === LIVENESS_PING && process.connected) process.send!({ type: LIVENESS_PONG, id: ping.id }, () => {});
  });
  process.channel.unref();
}
