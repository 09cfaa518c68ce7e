import { randomBytes } from 'node:crypto';
import type { StagingDb } from '../db/staging.database.ts';
import type { FencedTrx } from '../db/revocation-epoch.ts';
import type { ListPage } from './list-page.ts';

/** Templates the mail service sends (docs/product/users-and-tools.md#support-pack, `notify_customer`). */
export const MAIL_TEMPLATES = ['refund_issued', 'reship_created', 'apology'] as const;
/** One of {@link MAIL_TEMPLATES}. */
export type MailTemplate = (typeof MAIL_TEMPLATES)[number];

/** A sent message; `to` is the order's customer email; `createdAt` ISO 8601. */
export interface MailMessage {
  messageId: string;
  orderId: string;
  template: string;
  to: string;
  createdAt: string;
}

/** A message of a read-back window, with the tenant of its order. */
export interface WindowMessage extends MailMessage {
  tenant: string;
}

/** `staging.messages`: the mail service, with no dedupe (every send is a new message). */
export class MessagesRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /** Records a sent message, unconditionally, in `trx` (the epoch fence's transaction, ADR 0685). */
  async create(
    trx: FencedTrx,
    input: {
      orderId: string;
      tenant: string;
      template: MailTemplate;
      recipient: string;
      requester: string;
      actor: string;
    },
  ): Promise<MailMessage> {
    const row = await trx
      .insertInto('staging.messages')
      .values({
        message_id: `msg_${randomBytes(12).toString('hex')}`,
        order_id: input.orderId,
        tenant: input.tenant,
        template: input.template,
        recipient: input.recipient,
        requester: input.requester,
        actor: input.actor,
      })
      .returning(['message_id', 'order_id', 'template', 'recipient', 'created_at'])
      .executeTakeFirstOrThrow();
    return {
      messageId: row.message_id,
      orderId: row.order_id,
      template: row.template,
      to: row.recipient,
      createdAt: row.created_at.toISOString(),
    };
  }

  /** Messages sent about an order, oldest first. */
  async listByOrder(orderId: string): Promise<MailMessage[]> {
    const rows = await this.db
      .selectFrom('staging.messages')
      .select(['message_id', 'order_id', 'template', 'recipient', 'created_at'])
      .where('order_id', '=', orderId)
      .orderBy('created_at', 'asc')
      .orderBy('message_id', 'asc')
      .execute();
    return rows.map((r) => ({
      messageId: r.message_id,
      orderId: r.order_id,
      template: r.template,
      to: r.recipient,
      createdAt: r.created_at.toISOString(),
    }));
  }

  /**
   * Messages sent at or after `since`, about any order: the time-windowed read-back that finds a
   * message no step names (docs/decisions/0791-reconciliation-reads-shipments-and-mail-by-time-window.md).
   * With `page`: by message id after the cursor, at most `page.limit` rows; without, the whole
   * window, oldest first.
   */
  async listSince(since: Date, page?: ListPage): Promise<WindowMessage[]> {
    let q = this.db
      .selectFrom('staging.messages')
      .select(['message_id', 'order_id', 'tenant', 'template', 'recipient', 'created_at'])
      .where('created_at', '>=', since);
    if (page) {
      if (page.after !== undefined) q = q.where('message_id', '>', page.after);
      q = q.orderBy('message_id', 'asc').limit(page.limit);
    } else q = q.orderBy('created_at', 'asc').orderBy('message_id', 'asc');
    return (await q.execute()).map((r) => ({
      messageId: r.message_id,
      orderId: r.order_id,
      tenant: r.tenant,
      template: r.template,
      to: r.recipient,
      createdAt: r.created_at.toISOString(),
    }));
  }
}
