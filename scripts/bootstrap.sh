#!/usr/bin/env bash
# Sourced by ./run. Makes a fresh machine ready: Node >= 22.18 (installs node@24 from the npm
# registry into .tools/ when the system Node is older), pnpm 10, workspace dependencies, and
# reachable Postgres and Redis (scripts/services.sh starts them when they are not).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
mkdir -p "$TOOLS"

# `npm install --prefix` reads the global npmrc of the prefix, not the machine's: carry over the
# machine's CA file (a proxy with its own certificate) so the installs below trust the registry.
if command -v npm >/dev/null 2>&1 && [ -z "${npm_config_cafile:-}" ]; then
  cafile="$(npm config get cafile 2>/dev/null || true)"
  if [ -n "$cafile" ] && [ "$cafile" != "null" ] && [ "$cafile" != "undefined" ] && [ -f "$cafile" ]; then
    export npm_config_cafile="$cafile"
  fi
fi

node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=18)?0:1)'
}

if [ -x "$TOOLS/node/node_modules/.bin/node" ]; then
  export PATH="$TOOLS/node/node_modules/.bin:$PATH"
fi
if ! node_ok; then
  echo "[bootstrap] system Node $(node --version 2>/dev/null || echo none) is too old; installing node@24 from the npm registry" >&2
  npm install --no-audit --no-fund --loglevel=error --prefix "$TOOLS/node" node@24 >&2
  export PATH="$TOOLS/node/node_modules/.bin:$PATH"
  node_ok || { echo "[bootstrap] could not get Node >= 22.18" >&2; exit 1; }
fi

if [ -x "$TOOLS/pnpm/node_modules/.bin/pnpm" ]; then
  export PATH="$TOOLS/pnpm/node_modules/.bin:$PATH"
fi
if ! (command -v pnpm >/dev/null 2>&1 && pnpm --version 2>/dev/null | grep -q '^10\.'); then
  echo "[bootstrap] installing pnpm@10 into .tools/" >&2
  npm install --no-audit --no-fund --loglevel=error --prefix "$TOOLS/pnpm" pnpm@10 >&2
  export PATH="$TOOLS/pnpm/node_modules/.bin:$PATH"
fi

# Install workspace dependencies when the lockfile changed since the last install.
stamp="$ROOT/node_modules/.gatehouse-install-stamp"
want="$(cat "$ROOT/pnpm-lock.yaml" "$ROOT/package.json" 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[bootstrap] pnpm install" >&2
  (cd "$ROOT" && CI=true pnpm install --frozen-lockfile --reporter=silent >&2)
  echo "$want" > "$stamp"
fi

bash "$ROOT/scripts/services.sh" up >&2
