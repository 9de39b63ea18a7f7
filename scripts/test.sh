#!/usr/bin/env bash
# Run the test suite on a fresh Debian/Ubuntu machine: installs redis-server, redis-sentinel,
# openssl, chromium and chromium-driver (apt) if they are missing, creates .venv with the
# package and its test dependencies, then runs pytest.
# Extra arguments go to pytest. Used as is by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# redis-sentinel: the Sentinel tests run three sentinels (the same program as redis-server);
# openssl: the TLS tests make their CA and certificates with it; chromium and chromium-driver
# (the program chromedriver): the dashboard's browser test (tests/test_dashboard_browser.py).
missing=()
for pair in redis-server:redis-server redis-sentinel:redis-sentinel openssl:openssl \
  chromium:chromium chromedriver:chromium-driver; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing ${missing[*]}..."
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[test]"

# Four test processes (pytest-xdist; PYTEST_WORKERS=0 runs them in this one), each with
# its own servers on free ports: most of the slow tests wait on real crawls' delays and
# timers, not on the CPU, so four keep two cores busy (a quiet 2-core machine: 9 min 20 s
# with two, 6 min 13 s with four). pytest exits 5 when no test ran: with `set -e` that
# fails the run, as it should.
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-4}" "$@"
