import { BlockList, isIP } from 'node:net';
import { z } from 'zod';
import { storableString } from '../text.ts';
import { queryLimit } from './common.ts';

/**
 * Pushed workflow updates (docs/product/public-contract.md#pushed-updates,
 * docs/decisions/0250-pushed-workflow-events.md): the event a Server-Sent Events stream
 * (`GET /v1/workflows/:id/events`) and a tenant's webhook both carry, and the webhook
 * registration API of the ops service. An event holds the workflow's state, its terminal reason
 * and next step, and a summary of its actions and open approvals — never tool arguments, model
 * text, tokens or secrets.
 */

/** One action of a workflow as an event shows it (a subset of `GET /v1/workflows/:id`'s `actions[]`). */
export const EventActionSchema = z.strictObject({
  actionId: z.string(),
  tool: z.string(),
  /** Canonical target id (an order id, a change id). */
  target: z.string(),
  version: z.number().int().positive(),
  decision: z.enum(['ALLOW', 'DENY', 'REQUIRE_APPROVAL']),
  ruleId: z.string(),
  status: z.string(),
});
export type EventAction = z.infer<typeof EventActionSchema>;

/** An open approval as an event shows it (`pendingApprovals[]` of the read, without the digest). */
export const EventApprovalSchema = z.strictObject({
  approvalId: z.string(),
  actionId: z.string(),
  actionVersion: z.number().int().positive(),
  status: z.enum(['pending', 'approved']),
  ruleId: z.string(),
  /** ISO 8601. */
  expiresAt: z.string(),
});

/**
 * One workflow event: written in the transaction of the transition it reports (or of the intake,
 * for seq 1), so `seq` is durable and monotonic per workflow. `seq` is the SSE `id:`; a webhook
 * receiver orders by it.
 */
export const WorkflowEventSchema = z.strictObject({
  type: z.literal('workflow.updated'),
  workflowId: z.string(),
  ticketId: z.string(),
  seq: z.number().int().positive(),
  state: z.enum(['received', 'investigating', 'awaiting_approval', 'executing', 'completed', 'stopped', 'paused', 'needs_reconciliation']),
  /** The state before this event (null for the first). */
  previousState: z.string().nullable(),
  /** True for `completed`, `stopped`, `needs_reconciliation`: an SSE stream ends after such an event. */
  terminal: z.boolean(),
  stopReason: z.string().nullable(),
  nextStep: z.string().nullable(),
  actions: z.array(EventActionSchema),
  pendingApprovals: z.array(EventApprovalSchema),
  /** ISO 8601 instant of the transition. */
  at: z.string(),
});
export type WorkflowEvent = z.infer<typeof WorkflowEventSchema>;

/** SSE event name of a {@link WorkflowEvent} on `GET /v1/workflows/:id/events`. */
export const WORKFLOW_EVENT_NAME = 'workflow.updated';

/**
 * SSE event name of the last event of a stream the server ends before the workflow's terminal
 * event: `event: stream.closed`, `data: {"reason": …}` ({@link StreamClosedSchema}). It has no
 * `id:`, so a client resuming keeps its `Last-Event-ID`.
 */
export const STREAM_CLOSED_EVENT_NAME = 'stream.closed';

/**
 * Data of a `stream.closed` event: why the server ended the stream. `token_expired`: the bearer
 * token the stream was opened with reached its `exp` (docs/decisions/0688-every-bearer-token-expires.md);
 * reconnect with a fresh token and `Last-Event-ID`. `token_revoked`: an operator revoked that token
 * (its subject's tokens issued before a time, or its `jti`; docs/decisions/0695-user-tokens-can-be-revoked.md);
 * a new token is needed, and a reconnect with the revoked one is 401 `token_revoked`.
 */
export const StreamClosedSchema = z.strictObject({ reason: z.enum(['token_expired', 'token_revoked']) }).meta({ id: 'StreamClosed' });
export type StreamClosed = z.infer<typeof StreamClosedSchema>;

/**
 * `Last-Event-ID` request header (or `?lastEventId=`): the last `seq` the client saw. A positive
 * integer; anything else is 400 `bad_last_event_id`.
 */
export const LastEventIdSchema = z.coerce.number().int().min(0).max(2_147_483_647);

/** `POST /api/webhooks` (ops service, operators only): register a tenant's receiver. */
export const WebhookRegistrationSchema = z.strictObject({
  tenant: storableString().min(1).max(64),
  /** http(s) only; https only in production; no whitespace or control characters. Tenant configuration, never model input. */
  url: storableString()
    .min(1)
    .max(2000)
    .refine((u) => !/\s/.test(u) && ![...u].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f), {
      message: 'a URL may not contain whitespace or control characters',
    }),
});
export type WebhookRegistration = z.infer<typeof WebhookRegistrationSchema>;

/** A registered endpoint as the listing shows it (the secret only once, in the 201 answer; the URL without its query). */
export const WebhookEndpointViewSchema = z.strictObject({
  endpointId: z.string(),
  tenant: z.string(),
  url: z
    .string()
    .describe(
      'the URL as registered, normalised (an internationalized host in ASCII) and with its query, which may hold a token, shown as `?[redacted]` (ADR 0727)',
    ),
  createdBy: z.string(),
  createdAt: z.string(),
  disabledAt: z.string().nullable(),
});

/** The 201 answer of a registration: the view plus the signing secret (`whsec_<base64>`), shown once. */
export const WebhookRegisteredSchema = WebhookEndpointViewSchema.extend({ secret: z.string().startsWith('whsec_') });

/** `GET /api/webhooks/deliveries?status=&tenant=&limit=`: a delivery as the ops listing shows it. */
export const WebhookDeliveryViewSchema = z.strictObject({
  deliveryId: z.string(),
  endpointId: z.string(),
  tenant: z.string(),
  workflowId: z.string(),
  seq: z.number().int(),
  status: z.enum(['pending', 'delivered', 'failed']),
  attempts: z.number().int(),
  lastError: z.string().nullable(),
  nextAttemptAt: z.string(),
  createdAt: z.string(),
  finishedAt: z.string().nullable(),
});

/** Query of the delivery listing. */
export const WebhookDeliveryQuerySchema = z.strictObject({
  status: z.enum(['pending', 'delivered', 'failed']).optional(),
  tenant: storableString().min(1).max(64).optional(),
  limit: queryLimit(500, 100),
});

/**
 * The `last_error` of a webhook delivery that ended `failed` because its endpoint was disabled:
 * written by the disabling itself for the pending ones (ops) and by the delivery worker for one it
 * claims afterwards (agent loop), as the public contract says (docs/product/public-contract.md#webhooks).
 */
export const WEBHOOK_ENDPOINT_DISABLED = 'endpoint disabled';

/** Standard Webhooks header names (the Standard Webhooks naming): id, timestamp (unix seconds), `v1,<base64 HMAC-SHA256>`. */
export const WEBHOOK_HEADERS = { id: 'webhook-id', timestamp: 'webhook-timestamp', signature: 'webhook-signature' } as const;

/**
 * Address ranges a production webhook may not reach: this host and the networks behind it
 * (loopback, RFC 1918 private, link-local — cloud metadata services live at 169.254.169.254 —
 * carrier-grade NAT, unspecified, IETF protocol assignments, benchmarking, multicast and reserved,
 * IPv6 unique-local, link-local and multicast, and the NAT64 and 6to4 prefixes that reach IPv4
 * behind them). docs/decisions/0671-webhooks-reach-public-hosts-only.md.
 */
const NON_PUBLIC = (() => {
  const list = new BlockList();
  for (const [net, prefix] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.0.0.0', 24],
    ['192.168.0.0', 16],
    ['198.18.0.0', 15],
    ['224.0.0.0', 4],
    ['240.0.0.0', 4],
  ] as const)
    list.addSubnet(net, prefix, 'ipv4');
  for (const [net, prefix] of [
    ['::', 128],
    ['::1', 128],
    ['64:ff9b::', 96], // NAT64: reaches IPv4 addresses, the ones above included
    ['2002::', 16], // 6to4: the same
    ['fc00::', 7],
    ['fe80::', 10],
    ['ff00::', 8],
  ] as const)
    list.addSubnet(net, prefix, 'ipv6');
  return list;
})();

/**
 * True when `address` (an IPv4 or IPv6 literal, bracketed or not, an IPv4-mapped one included) lies in a range
 * a production webhook may not reach ({@link NON_PUBLIC}); false for a public address and for
 * anything that is not an IP literal.
 */
export function nonPublicAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, ''); // a URL's hostname keeps IPv6 in brackets
  const family = isIP(bare); // an IPv4-mapped IPv6 address is checked against the IPv4 ranges by BlockList itself
  return family === 4 ? NON_PUBLIC.check(bare, 'ipv4') : family === 6 ? NON_PUBLIC.check(bare, 'ipv6') : false;
}

/**
 * Why a webhook URL is refused, or null when it is acceptable: an absolute `http:` or `https:`
 * URL without credentials (user:password), fragment or port 0 (no receiver listens there); in production (`GATEHOUSE_ENV=production`)
 * `https:` only, and never to `localhost` or a non-public IP literal ({@link nonPublicAddress}:
 * a tenant's webhook must not reach the services' own network). The one owner of this rule: the
 * ops API checks it at registration and the delivery worker again before every attempt, whose
 * connection also resolves and checks a host name (docs/decisions/0250-pushed-workflow-events.md, 0671).
 */
export function webhookUrlProblem(url: string, production: boolean): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'not an absolute URL';
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return `scheme ${u.protocol} is not http or https`;
  if (u.port === '0') return 'port 0 is not a port a receiver can listen on';
  if (production && u.protocol !== 'https:') return 'production delivers to https URLs only';
  const host = u.hostname.replace(/\.$/, ''); // `localhost.` is `localhost`
  if (production && (host === 'localhost' || host.endsWith('.localhost') || nonPublicAddress(host)))
    return `production delivers to public hosts only (${u.hostname} is this machine or a private network)`;
  if (u.username || u.password) return 'credentials in the URL are not allowed (the signature authenticates)';
  if (u.hash) return 'a fragment is not allowed';
  return null;
}

/**
 * The form a webhook URL is stored, delivered to and compared in: Node's WHATWG URL serialization
 * (`URL.href`) — the host lowercased and, when it is an internationalized name, turned to ASCII
 * (IDNA `ToASCII`, `xn--` labels) by the parser itself, a default port dropped, the path and query
 * percent-encoded. A unicode and a punycode spelling of one host are thus one URL, and
 * {@link webhookUrlProblem} and the delivery's connection judge the ASCII host
 * (docs/decisions/0727-webhook-urls-are-normalised-and-shown-without-their-query.md).
 * @throws TypeError (`ERR_INVALID_URL`) when `url` is not an absolute URL: check it with {@link webhookUrlProblem} first.
 */
export function normalizedWebhookUrl(url: string): string {
  return new URL(url).href;
}

/** What replaces a webhook URL's query, or a whole URL that does not parse, wherever one is shown. */
export const REDACTED_URL_PART = '[redacted]';

/**
 * A webhook URL as it is shown once registered — in every answer of the ops API, listing and log:
 * scheme, ASCII host, port and path, its query (which often carries the receiver's token)
 * replaced by `?[redacted]`; credentials and fragment, which registration refuses, are never
 * shown. A stored value that does not parse is shown as `[redacted]` (ADR 0727). Deliveries use
 * the stored URL, query included.
 */
export function shownWebhookUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return REDACTED_URL_PART;
  }
  return `${u.origin}${u.pathname}${u.search === '' ? '' : `?${REDACTED_URL_PART}`}`;
}
