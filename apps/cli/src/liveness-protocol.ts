/** The message type the supervisor sends a service process over IPC to learn that it is alive (ADR 0739). */
export const LIVENESS_PING = 'gatehouse:liveness-ping';
/** The answer of a live service process to {@link LIVENESS_PING}, with the ping's `id`. */
export const LIVENESS_PONG = 'gatehouse:liveness-pong';
