#!/usr/bin/env bash
# A headless Chromium for the viewer's browser tests (tests/view/test_browser.py), from Debian's packages:
# `chromium` and `chromium-driver` (the driver of the same build). Nothing is downloaded at test time but
# these packages, and only when they are missing and we are root on a Debian-like system.
#
#   bash scripts/browser_local.sh          # install if missing, then print "CHROMIUM CHROMEDRIVER"
set -euo pipefail

say() { printf 'browser_local: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

found() { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }

if ! found; then
  [ "$(id -u)" = 0 ] || die "chromium/chromedriver are not installed and only root can install them (apt-get install chromium chromium-driver)"
  command -v apt-get >/dev/null || die "chromium/chromedriver are not installed and this is not a Debian-like system"
  say "installing chromium and chromium-driver from the Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
  found || die "apt-get installed the packages, but chromium or chromedriver is still not on PATH"
fi
echo "$(command -v chromium) $(command -v chromedriver)"
