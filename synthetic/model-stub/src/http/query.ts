import type { Request } from 'express';

/** A single string query parameter, or undefined when absent, empty or repeated. */
export function queryString(req: Request, name: string): string | undefined {
  const v = req.query[name];
  return typeof v === 'string' && v !== '' ? v : undefined;
}
