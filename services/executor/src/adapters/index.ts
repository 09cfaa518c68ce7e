import type { AdapterCall, AdapterResult } from './adapter.ts';
import { issueRefund } from './payments.adapter.ts';
import { lookupOrder, reshipOrder } from './orders.adapter.ts';
import { notifyCustomer } from './mail.adapter.ts';
import { lookupChange, prepareChange, scheduleChange } from './changes.adapter.ts';

export * from './adapter.ts';
export { reshipBaseline, resolveByReadBack } from './orders.adapter.ts';

/** The fixed adapters, by tool name. No adapter runs model-written code, SQL, URLs or paths. */
export const adapters: Record<string, (call: AdapterCall) => Promise<AdapterResult>> = {
  lookup_order: lookupOrder,
  issue_refund: issueRefund,
  reship_order: reshipOrder,
  notify_customer: notifyCustomer,
  lookup_change: lookupChange,
  prepare_change: prepareChange,
  schedule_change: scheduleChange,
};
