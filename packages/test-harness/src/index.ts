/**
 * `@gatehouse/test-harness`: what tests and benchmarks run on (docs/decisions/0330-layout.md) —
 * a database, queue prefix and ports of their own, private Postgres and Redis servers to restart,
 * a TCP cut, and every service as a process ({@link startE2EStack}). The row factories are
 * `@gatehouse/testing`.
 */
export * from './infrastructure.ts';
export * from './private-postgres.ts';
export * from './private-redis.ts';
export * from './stack.ts';
export * from './tcp-cut.ts';
export * from './tcp-hang.ts';
export * from './audit-tamper.ts';
export * from './lock-wait.ts';
export * from './timed-get.ts';
export * from './raw-http.ts';
export * from './http-proxy.ts';
