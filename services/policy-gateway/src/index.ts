/**
 * `@gatehouse/policy-gateway`: the proposal processor, for in-process tests. The process itself
 * is `src/main.ts` (health port 7111).
 */
export { processProposal, type ProposalDeps } from './jobs/proposals.processor.ts';
