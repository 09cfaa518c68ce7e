import type { Express } from 'express';

/** The parts of an express 5 router layer (package `router` 2) that {@link allowedMethods} reads. */
interface RouterLayer {
  /** Whether `path` matches the layer (a route: the whole path; a mount: its prefix); false otherwise. */
  match(path: string): { path: string } | false;
  route?: { methods: Record<string, boolean>; _methods(): string[] };
  handle: { stack?: RouterLayer[] };
}

/**
 * The methods, upper case, of every route of `app` (mounted routers included) whose path matches
 * `path` — what an `Allow` header names for it (`HEAD` with `GET`, as express answers it). Empty
 * when no route matches, or one takes every method (`app.all`): then no method is wrong; empty too
 * when the router's internals are not the shape read here (then the caller's 404 stands).
 */
export function allowedMethods(app: Express, path: string): string[] {
  const found = new Set<string>();
  let anyMethod = false;
  const walk = (stack: RouterLayer[], at: string): void => {
    for (const layer of stack) {
      const m = layer.match(at);
      if (!m) continue;
      if (layer.route) {
        if (layer.route.methods._all) anyMethod = true;
        for (const method of layer.route._methods()) found.add(method);
      } else if (layer.handle.stack) {
        const rest = at.slice(m.path.length);
        walk(layer.handle.stack, rest.startsWith('/') ? rest : `/${rest}`);
      }
    }
  };
  try {
    walk((app as unknown as { router: { stack: RouterLayer[] } }).router.stack, path);
  } catch {
    // A router of another shape (an express upgrade): no method is called wrong, the 404 stands.
    return [];
  }
  return anyMethod ? [] : [...found].sort();
}
