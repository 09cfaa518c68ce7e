/**
 * `@gatehouse/agent-loop`: the intake app factory, the event hub it serves from and the turn
 * and result processors, for in-process tests. The process itself is `src/main.ts` (port 7101).
 */
export { createIntakeApp, type IntakeAppOptions } from './http/app.ts';
export type { PackSettings } from './http/tickets.router.ts';
export { WorkflowEventHub } from './domain/event-hub.ts';
export { processTurn, type TurnDeps } from './jobs/turns.processor.ts';
export { processResult } from './jobs/results.processor.ts';
