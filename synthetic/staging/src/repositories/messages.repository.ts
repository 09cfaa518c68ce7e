import { randomBytes } from 'node:crypto';
import type { StagingDb } from '../db/staging.database.ts';
import type { FencedTrx } from '../db/revocation-epoch.ts';

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
}
