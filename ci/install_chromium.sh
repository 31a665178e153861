#!/usr/bin/env bash
# install_chromium.sh — make a headless Chromium available for the report's browser test
# (tests/analysis/test_report.py), with Debian's package when none is installed. Idempotent; needs
# root for apt-get. Prints the browser it found or installed.
set -euo pipefail

log() { printf '[install_chromium] %s\n' "$*" >&2; }

for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then
    log "found $(command -v "$b")"
    exit 0
  fi
done
[ "$(id -u)" -eq 0 ] || { log "ERROR: no Chromium and not root: apt-get install chromium"; exit 1; }
t0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { log "ERROR: chromium not on PATH after install"; exit 1; }
log "installed $(chromium --version 2>/dev/null | head -1) in $(( $(date +%s) - t0 )) s"
