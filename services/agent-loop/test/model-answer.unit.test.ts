import { describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import { MAX_REASON_CHARS, TRUNCATION_MARKER } from '@gatehouse/tools';
import { MAX_ANSWER_TOKENS, tokenCount, trustedAnswer } from '../src/domain/model-answer.ts';

/** A model answer with only the fields trustedAnswer reads. */
const answer = (model: unknown, usage?: Partial<OpenAI.Responses.ResponseUsage>, id: unknown = 'resp_1'): OpenAI.Responses.Response =>
  ({ id, model, output: [], usage }) as unknown as OpenAI.Responses.Response;

describe('tokenCount (a reported count made safe to charge, ADR 0744)', () => {
  it('keeps a whole count, rounds a fraction up, and never goes below 0 or above the ceiling', () => {
    expect([tokenCount(42), tokenCount(0), tokenCount(1.2)]).toEqual([42, 0, 2]);
    expect([tokenCount(-5), tokenCount(-Infinity), tokenCount(Number.NaN), tokenCount('7'), tokenCount(undefined)]).toEqual([
      0, 0, 0, 0, 0,
    ]);
    expect([tokenCount(1e300), tokenCount(Infinity)]).toEqual([MAX_ANSWER_TOKENS, MAX_ANSWER_TOKENS]);
  });
});

describe('trustedAnswer (the model server’s own fields, ADR 0744)', () => {
  it('an honest answer is unchanged', () => {
    const usage = { input_tokens: 10, output_tokens: 5, total_tokens: 15 };
    const { response, corrected } = trustedAnswer(answer('gatehouse-stub-1', usage));
    expect(response.model).toBe('gatehouse-stub-1');
    expect(response.usage).toMatchObject(usage);
    expect(response.id).toBe('resp_1');
    expect(corrected).toEqual({ id: false, model: false, usage: false });
  });

  it('a model name holding a secret is redacted; a long one is cut and marked', () => {
    const { response, corrected } = trustedAnswer(answer(`m-CANARY_SECRET_x1 ${'m'.repeat(10_000)}`));
    expect(response.model).not.toContain('CANARY');
    expect(response.model.length).toBeLessThanOrEqual(MAX_REASON_CHARS + TRUNCATION_MARKER.length);
    expect(response.model.endsWith(TRUNCATION_MARKER)).toBe(true);
    expect(corrected.model).toBe(true);
    expect(trustedAnswer(answer(undefined)).response.model).toBe('');
  });

  it('a response id holding a secret is redacted; a long one is cut and marked', () => {
    const { response, corrected } = trustedAnswer(answer('m', undefined, `resp_CANARY_SECRET_id9 ${'r'.repeat(5000)}`));
    expect(response.id).not.toContain('CANARY');
    expect(response.id.length).toBeLessThanOrEqual(MAX_REASON_CHARS + TRUNCATION_MARKER.length);
    expect(response.id.endsWith(TRUNCATION_MARKER)).toBe(true);
    expect(corrected).toEqual({ id: true, model: false, usage: false });
    expect(trustedAnswer(answer('m', undefined, 42)).response.id).toBe('');
  });

  it('negative counts are charged as 0, and the total is never below input plus output', () => {
    const { response, corrected } = trustedAnswer(answer('m', { input_tokens: -1000, output_tokens: 7, total_tokens: -993 }));
    expect(response.usage).toMatchObject({ input_tokens: 0, output_tokens: 7, total_tokens: 7 });
    expect(corrected.usage).toBe(true);
    const low = trustedAnswer(answer('m', { input_tokens: 10, output_tokens: 10, total_tokens: 1 })).response.usage;
    expect(low?.total_tokens).toBe(20);
  });

  it('an answer without usage stays without it', () => {
    expect(trustedAnswer(answer('m')).response.usage).toBeUndefined();
  });
});
