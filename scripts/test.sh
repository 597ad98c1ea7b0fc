#!/usr/bin/env bash
# Install everything the tests need on a fresh machine, then run lint and every test
# (engine, CLI, dashboard AppTests, the real-browser test, the emulated-cluster validation).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/lib/chromium/chromium ]; then
  echo "installing Debian chromium for the browser tests..."
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
  fi
fi

python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
if [ -f requirements-validation.txt ]; then
  # DS_BUILD_OPS=0: DeepSpeed installs without compiling its CUDA ops (only its config parsers
  # are used here)
  DS_BUILD_OPS=0 python -m pip install -q --disable-pip-version-check -r requirements-validation.txt
fi

python -m ruff check .
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "WARNING: pytest collected no tests (exit 5); check the test layout" >&2
  exit 0
fi
exit "$rc"
