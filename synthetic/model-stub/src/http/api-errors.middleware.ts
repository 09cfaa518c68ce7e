import type { NextFunction, Request, Response } from 'express';
import type { Logger } from '@gatehouse/platform';
import { apiError } from '../domain/api-error.ts';
import { newId } from '../domain/response-factory.ts';

/** 404 for unknown `/v1/*` routes in the API error shape (as the real API: "Invalid URL"). */
export function apiNotFound(req: Request, res: Response): void {
  res.set('x-request-id', newId('req'));
  res.status(404).json(apiError(`Invalid URL (${req.method} ${req.originalUrl})`));
}

/**
 * Error middleware for `/v1/*`: unparseable JSON → 400 and anything else → 500 `server_error`,
 * both in the API error shape `{error:{message,type,param,code}}` so the openai client maps them.
 */
export function apiErrorHandler(log: Logger) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction): void => {
    res.set('x-request-id', newId('req'));
    const e = err as { status?: number; type?: string; message?: string };
    if (e.type && typeof e.status === 'number' && e.status >= 400 && e.status < 500) {
      res.status(e.status).json(apiError(`We could not parse the JSON body of your request: ${e.message ?? 'invalid body'}`));
      return;
    }
    log.error({ err }, 'unhandled error in /v1');
    res.status(500).json(apiError('The server had an error while processing your request.', { type: 'server_error' }));
  };
}
