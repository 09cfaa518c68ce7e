/**
 * `@gatehouse/audit`: the invariant monitors, for in-process tests. The process itself is
 * `src/main.ts` (health port 7113).
 */
export { evaluateMonitors, type Alert, type MonitorConfig } from './domain/monitors.ts';
