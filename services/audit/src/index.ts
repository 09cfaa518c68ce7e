/**
 * `@gatehouse/audit`: the invariant monitors, the chain writer and the anchoring, for in-process tests. The process itself is
 * `src/main.ts` (health port 7113).
 */
export { evaluateMonitors, type Alert, type MonitorConfig } from './domain/monitors.ts';
export { chainPending } from './jobs/chain.writer.ts';
export { anchorHead } from './domain/anchor.ts';
export { auditLossReadyCheck } from './domain/audit-loss-ready.ts';
