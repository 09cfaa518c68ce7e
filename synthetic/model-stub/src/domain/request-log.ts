import type { ReasoningReport } from './reasoning.ts';

/**
 * One request received on `POST /v1/responses`, as `GET /requests` returns it. `at` is an ISO
 * 8601 time; `status` is the HTTP status the stub answered; `retryCount` is the
 * `X-Stainless-Retry-Count` header sent by the openai client (null when absent).
 */
export type RequestRecord = {
  at: string;
  requestId: string;
  metadata: Record<string, string> | null;
  model: string | null;
  /** Names of the offered tools (function tools by name, others by type). */
  tools: string[];
  toolChoice: unknown;
  /** The `input` exactly as received (string or item array). */
  input: unknown;
  instructions: string | null;
  status: number;
  retryCount: number | null;
  /** `resp_…` id when a response object was returned, else null. */
  responseId: string | null;
  /** The `include` list of the request (e.g. `reasoning.encrypted_content`). */
  include: string[];
  /** Reasoning items received and emitted (docs/decisions/0145-reasoning-items-in-the-transcript.md); null when the input was refused before the check. */
  reasoning: ReasoningReport | null;
};

/** A 400 the stub returned for a broken call_id pairing (tests assert it never happens). */
export type PairingErrorRecord = {
  at: string;
  ticketId: string | null;
  workflowId: string | null;
  callId: string;
  message: string;
};

/** Filter of {@link RequestLog.query} / {@link RequestLog.clear}: by ticket and/or workflow id. */
export type RequestFilter = { ticketId?: string | undefined; workflowId?: string | undefined };

function matches(meta: Record<string, string> | null, f: RequestFilter): boolean {
  if (f.ticketId !== undefined && meta?.ticket_id !== f.ticketId) return false;
  if (f.workflowId !== undefined && meta?.workflow_id !== f.workflowId) return false;
  return true;
}

/** In-memory, bounded log of requests (oldest dropped beyond `maxRequests`, default 5000). */
export class RequestLog {
  private requests: RequestRecord[] = [];
  private pairing: PairingErrorRecord[] = [];
  private readonly maxRequests: number;

  constructor(maxRequests = 5000) {
    this.maxRequests = maxRequests;
  }

  /** Appends a record (callers may update `status`/`responseId` until the reply is sent). */
  add(record: RequestRecord): RequestRecord {
    this.requests.push(record);
    if (this.requests.length > this.maxRequests) this.requests.splice(0, this.requests.length - this.maxRequests);
    return record;
  }

  /** Records a pairing 400 against the request's ticket and workflow (bounded like requests). */
  addPairingError(record: PairingErrorRecord): void {
    this.pairing.push(record);
    if (this.pairing.length > this.maxRequests) this.pairing.splice(0, this.pairing.length - this.maxRequests);
  }

  /** Requests and pairing errors matching the filter (all when empty), oldest first. */
  query(f: RequestFilter = {}): {
    requests: RequestRecord[];
    pairingErrors: number;
    pairingErrorDetails: PairingErrorRecord[];
    reasoningErrors: number;
  } {
    const details = this.pairing.filter((p) => matches({ ticket_id: p.ticketId ?? '', workflow_id: p.workflowId ?? '' }, f));
    const requests = this.requests.filter((r) => matches(r.metadata, f));
    return {
      requests,
      pairingErrors: details.length,
      pairingErrorDetails: details,
      // Issued reasoning items left out of a later request, or not right before their call.
      reasoningErrors: requests.reduce((n, r) => n + (r.reasoning ? r.reasoning.missing.length + r.reasoning.misplaced.length : 0), 0),
    };
  }

  /** Drops the matching requests and pairing errors (all when the filter is empty); returns how many requests. */
  clear(f: RequestFilter = {}): number {
    const before = this.requests.length;
    this.requests = this.requests.filter((r) => !matches(r.metadata, f));
    this.pairing = this.pairing.filter((p) => !matches({ ticket_id: p.ticketId ?? '', workflow_id: p.workflowId ?? '' }, f));
    return before - this.requests.length;
  }
}
