/**
 * One page of a whole-table read-back listing: the rows whose id follows `after` (exclusive), by
 * id, at most `limit`. A long ledger is read in bounded answers (each under the reader's body cap).
 */
export interface ListPage {
  after?: string;
  limit: number;
}
