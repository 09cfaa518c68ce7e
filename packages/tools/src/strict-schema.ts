import { z } from 'zod';
import { canonicalJson } from '@gatehouse/contracts';
import { createHash } from 'node:crypto';
import type { ToolDefinition } from './catalog.ts';

/** A Responses API function tool (flat shape, `strict: true`). */
export interface FunctionToolParam {
  type: 'function';
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  strict: true;
}

const UNSUPPORTED = [
  'allOf',
  'not',
  'oneOf',
  'if',
  'then',
  'else',
  'dependentRequired',
  'dependentSchemas',
  'patternProperties',
  'propertyNames',
  'minProperties',
  'maxProperties',
  'uniqueItems',
  'prefixItems',
  'contains',
  'unevaluatedProperties',
  'unevaluatedItems',
];

/**
 * Checks a JSON Schema against the Responses API strict-mode rules (structured-outputs guide,
 * "Supported schemas"): root `type: "object"`, every object `additionalProperties: false` with
 * every property required, no unsupported keyword, arrays with `items`.
 * @returns the list of violations (empty when the schema is acceptable).
 */
export function strictModeViolations(schema: unknown, path = '$'): string[] {
  const out: string[] = [];
  if (typeof schema !== 'object' || schema === null) return out;
  const s = schema as Record<string, unknown>;
  if (path === '$' && (s.type !== 'object' || 'anyOf' in s)) out.push(`${path}: root must be type object, not anyOf`);
  for (const k of UNSUPPORTED) if (k in s) out.push(`${path}: unsupported keyword ${k}`);
  if (s.type === 'object') {
    if (s.additionalProperties !== false) out.push(`${path}: additionalProperties must be false`);
    const props = (s.properties ?? {}) as Record<string, unknown>;
    const required = new Set((s.required ?? []) as string[]);
    for (const [k, v] of Object.entries(props)) {
      if (!required.has(k)) out.push(`${path}.${k}: every property must be required`);
      out.push(...strictModeViolations(v, `${path}.${k}`));
    }
  }
  if (s.type === 'array' && !('items' in s)) out.push(`${path}: array without items`);
  if (Array.isArray(s.anyOf)) s.anyOf.forEach((b, i) => out.push(...strictModeViolations(b, `${path}.anyOf[${i}]`)));
  if (s.items) out.push(...strictModeViolations(s.items, `${path}.items`));
  return out;
}

/**
 * The strict function tool for a definition, generated from its zod schema.
 * @throws Error listing strict-mode violations (so a bad schema fails at boot).
 */
export function toFunctionTool(tool: ToolDefinition): FunctionToolParam {
  const parameters = z.toJSONSchema(tool.args, { target: 'draft-2020-12' }) as Record<string, unknown>;
  delete parameters.$schema;
  const violations = strictModeViolations(parameters);
  if (violations.length) throw new Error(`tool ${tool.name} is not strict-mode valid:\n  ${violations.join('\n  ')}`);
  return { type: 'function', name: tool.name, description: tool.description, parameters, strict: true };
}

/** SHA-256 hex over the RFC 8785 canonical JSON of `value`. */
export function digestOf(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}

/**
 * Catalog digest: SHA-256 over the canonical JSON of every tool's strict schema and effect
 * contract. Recorded with every workflow and audit event.
 */
export function catalogDigest(tools: readonly ToolDefinition[]): string {
  return digestOf(
    tools.map((t) => ({
      name: t.name,
      parameters: toFunctionTool(t).parameters,
      effectClass: t.effectClass,
      retryClass: t.retryClass,
      downstream: t.downstream,
      scope: t.scope,
      consequential: t.consequential,
    })),
  );
}
