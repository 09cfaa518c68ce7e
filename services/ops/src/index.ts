/**
 * `@gatehouse/ops`: the ops dashboard's app factory, its queue board and its workflow list, for in-process tests.
 * The process itself is `src/main.ts` (port 7105).
 */
export { createOpsApp, type OpsAppOptions } from './http/app.ts';
export {
  BOARD_API_DEADLINE_MS,
  BOARD_MAX_JOBS_PER_PAGE,
  COUNTS_TIMEOUT_MS,
  createQueueBoard,
  type QueueBoard,
} from './http/queue-board.ts';
export { workflowOverview } from './domain/overview.ts';
