import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { CLIENT_ROOT, renderGenerated } from './render-generated.ts';

// `pnpm -F @gatehouse/client generate`: rewrites the committed documents and types from the zod
// contracts (packages/client/test/generated.test.ts fails until this has run after a contract change).
for (const [path, content] of Object.entries(await renderGenerated())) {
  const file = resolve(CLIENT_ROOT, path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, content);
  console.log(`wrote ${path}`);
}
