import { z } from 'zod';
import { AuditEventSchema, canonicalJson, sha256Hex, type ReleaseManifest } from '@gatehouse/contracts';
import { toolsOfPack, type Pack } from './catalog.ts';
import { instructionsFor } from './instructions.ts';
import { catalogDigest } from './strict-schema.ts';

const PACKS: readonly Pack[] = ['support', 'change'];

/** The digests of this code a release manifest must name (docs/product/releases.md#release-bundle). */
export type CodeDigests = Pick<ReleaseManifest, 'prompt' | 'toolCatalog' | 'auditSchema'>;

/**
 * Computes, from the code, the sha256 of each pack's instructions, each pack's tool catalog
 * digest and the audit-event schema digest (canonical JSON of its JSON Schema).
 */
export function codeDigests(): CodeDigests {
  return {
    prompt: { support: instructionsFor('support').hash, change: instructionsFor('change').hash },
    toolCatalog: { support: catalogDigest(toolsOfPack('support')), change: catalogDigest(toolsOfPack('change')) },
    auditSchema: sha256Hex(canonicalJson(z.toJSONSchema(AuditEventSchema))),
  };
}

/**
 * Compares a manifest's prompt, tool catalog and audit schema digests with {@link codeDigests}.
 * @returns one line per mismatch (empty: the manifest describes this code).
 */
export function releaseDigestProblems(m: Pick<ReleaseManifest, 'prompt' | 'toolCatalog' | 'auditSchema'>): string[] {
  const now = codeDigests();
  const problems: string[] = [];
  for (const pack of PACKS) {
    if (m.prompt[pack] !== now.prompt[pack]) problems.push(`prompt.${pack} digest differs from the code (${now.prompt[pack]})`);
    if (m.toolCatalog[pack] !== now.toolCatalog[pack])
      problems.push(`toolCatalog.${pack} digest differs from the code (${now.toolCatalog[pack]})`);
  }
  if (m.auditSchema !== now.auditSchema) problems.push(`auditSchema digest differs from the code (${now.auditSchema})`);
  return problems;
}
