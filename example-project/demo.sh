#!/usr/bin/env bash
# The scrapy-redis demo: two workers crawl a local 2,000-page site through one Redis queue.
#
#   bash example-project/demo.sh [--pages N] [--workers N] [--idle SECONDS]
#
# On a fresh Debian/Ubuntu machine it first installs what is missing: redis-server
# (apt-get, unless REDIS_URL points at a server) and this repository's package
# (pip install -e, into ./.venv-demo if the system Python refuses). Then it runs
# demo.py, which starts a throwaway redis-server unless REDIS_URL is set.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
python="${PYTHON:-$(command -v python3 || command -v python || true)}"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    echo "Installing $* with apt-get..."
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

if [ -z "${REDIS_URL:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
    apt_install redis-server
fi
if [ -z "$python" ]; then
    apt_install python3 python3-pip python3-venv
    python="$(command -v python3)"
fi

if ! "$python" -c "import scrapy_redis" >/dev/null 2>&1; then
    venv="$root/.venv-demo"
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import scrapy_redis" >/dev/null 2>&1; then
        python="$venv/bin/python"
    elif "$python" -m pip --version >/dev/null 2>&1 \
            && "$python" -m pip install -q -e "$root" 2>/dev/null; then
        :  # installed for this Python
    else
        # No pip, or an "externally managed" system Python (PEP 668): use a virtualenv.
        echo "Installing scrapy-redis into $venv..."
        "$python" -m venv "$venv" >/dev/null 2>&1 || {
            apt_install python3-venv python3-pip
            rm -rf "$venv"
            "$python" -m venv "$venv"
        }
        "$venv/bin/python" -m pip install -q -e "$root"
        python="$venv/bin/python"
    fi
fi

exec "$python" "$here/demo.py" "$@"
