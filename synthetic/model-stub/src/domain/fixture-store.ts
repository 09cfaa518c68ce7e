import { z } from 'zod';

const headerValue = z.union([z.string(), z.number()]).transform((v) => String(v));

/** Overrides of the answer's own fields, for the non-error entries (see {@link FixtureEntrySchema}). */
const answerOverrides = {
  id: z.string().optional(),
  model: z.string().optional(),
  usage: z.object({ input_tokens: z.number(), output_tokens: z.number(), total_tokens: z.number() }).partial().optional(),
};

/**
 * One scripted model turn (docs/product/public-contract.md#model-stub):
 * - `function_calls`: one response with these calls, each with a fresh `call_id` unless it names
 *   its own `call_id` (to play a server that repeats them, e.g. `call_0` in every response);
 *   `arguments` is the raw string sent verbatim, malformed or not (an object is JSON-encoded for you);
 * - `message`: an assistant message with one `output_text` part;
 * - `refusal`: an assistant message whose content part is `{type:"refusal", refusal:text}`;
 * - each of these three may also set the response's `id`, its `model` name and any of its `usage`
 *   counts (any number, negative or fractional: to play a server whose answer lies about them);
 * - `error`: that HTTP status (400–599) with `body` (default: the API error shape for the
 *   status, `message` overriding its text) and `headers` (e.g. `retry-after-ms`, `x-should-retry`).
 */
export const FixtureEntrySchema = z.discriminatedUnion('type', [
  z.object({
    ...answerOverrides,
    type: z.literal('function_calls'),
    calls: z
      .array(
        z.object({
          name: z.string().min(1),
          call_id: z.string().min(1).optional(),
          arguments: z
            .union([z.string(), z.record(z.string(), z.unknown())])
            .transform((v) => (typeof v === 'string' ? v : JSON.stringify(v))),
        }),
      )
      .min(1),
  }),
  z.object({ ...answerOverrides, type: z.literal('message'), text: z.string() }),
  z.object({ ...answerOverrides, type: z.literal('refusal'), text: z.string() }),
  z.object({
    type: z.literal('error'),
    status: z.number().int().min(400).max(599),
    message: z.string().optional(),
    body: z.unknown().optional(),
    headers: z.record(z.string(), headerValue).optional(),
  }),
]);

/** A validated fixture entry (see {@link FixtureEntrySchema}). */
export type FixtureEntry = z.output<typeof FixtureEntrySchema>;

/**
 * Body of `POST /fixtures`: `{ticketId, responses, repeat?}`. Entries append to the ticket's
 * queue; with `repeat: true` exactly one entry is given and it is returned forever once the
 * queue is empty (a model that proposes the same call forever, each with a fresh call_id).
 */
export const FixtureRequestSchema = z
  .object({
    ticketId: z.string().min(1),
    repeat: z.boolean().optional(),
    responses: z.array(FixtureEntrySchema).min(1),
  })
  .refine((r) => !r.repeat || r.responses.length === 1, {
    message: 'repeat: true takes exactly one entry in responses',
    path: ['responses'],
  });

/** Input shape of `POST /fixtures` (before zod transforms). */
export type FixtureRequest = z.input<typeof FixtureRequestSchema>;

/** Queued fixtures of one ticket. */
export type FixtureQueue = { queue: FixtureEntry[]; repeat: FixtureEntry | null };

/** In-memory fixture queues keyed by ticket id (`metadata.ticket_id` of requests). */
export class FixtureStore {
  private readonly byTicket = new Map<string, FixtureQueue>();

  /** Appends entries (or sets the repeated entry); returns the ticket's queue length. */
  add(req: z.output<typeof FixtureRequestSchema>): { ticketId: string; queued: number; repeat: boolean } {
    const q = this.byTicket.get(req.ticketId) ?? { queue: [], repeat: null };
    if (req.repeat) q.repeat = req.responses[0] ?? null;
    else q.queue.push(...req.responses);
    this.byTicket.set(req.ticketId, q);
    return { ticketId: req.ticketId, queued: q.queue.length, repeat: q.repeat !== null };
  }

  /** Consumes the next entry for a ticket: the queue in order, then the repeated entry; null when none. */
  next(ticketId: string | undefined): FixtureEntry | null {
    if (ticketId === undefined) return null;
    const q = this.byTicket.get(ticketId);
    if (!q) return null;
    return q.queue.shift() ?? q.repeat;
  }

  /** Clears one ticket's fixtures, or all; returns how many tickets were cleared. */
  clear(ticketId?: string): number {
    if (ticketId !== undefined) return this.byTicket.delete(ticketId) ? 1 : 0;
    const n = this.byTicket.size;
    this.byTicket.clear();
    return n;
  }

  /** A copy of the pending fixtures, of one ticket or all. */
  snapshot(ticketId?: string): Record<string, FixtureQueue> {
    const out: Record<string, FixtureQueue> = {};
    for (const [k, q] of this.byTicket) {
      if (ticketId === undefined || k === ticketId) out[k] = { queue: [...q.queue], repeat: q.repeat };
    }
    return out;
  }
}
