#!/usr/bin/env bash
# The approver-inbox test drives Debian's Chromium headless (never a downloaded browser).
# Installs it with apt-get when missing and running as root; otherwise says how.
set -euo pipefail
CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[chromium] installing Debian's chromium for the browser tests" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
else
  echo "[chromium] $CHROMIUM is missing: install Debian's chromium (apt-get install chromium) or set CHROMIUM_PATH" >&2
fi
