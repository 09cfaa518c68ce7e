import { fuzzSurface } from './support/suite.ts';

// Every bad input to the approval service's HTTP surface is a 4xx: fuzzed paths, encodings, headers,
// bodies and forged tokens (see support/requests.ts and support/tokens.ts). FUZZ_RUNS=<total>
// sends more (default 10,000 across the three surfaces); FUZZ_SEED=<n> replays a run.
fuzzSurface('approval');
