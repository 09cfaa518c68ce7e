export * from './normalize.ts';
export * from './catalog.ts';
export * from './strict-schema.ts';
export * from './parse.ts';
export * from './json-keys.ts';
export * from './output-boundary.ts';
export * from './instructions.ts';
export * from './release-digests.ts';
