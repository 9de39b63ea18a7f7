#!/usr/bin/env bash
# The scrapy-redis demo: two workers crawl a local 2,000-page site through one Redis queue.
#
#   bash example-project/demo.sh [--pages N] [--workers N] [--idle SECONDS] [--log-dir DIR]
#
# Everything Python is installed into a virtual environment, never into the system
# Python: the repository's .venv, the one `bash scripts/test.sh` uses (created here if
# missing; VENV=path chooses another). On a fresh Debian/Ubuntu machine it also installs
# redis-server with apt-get (unless REDIS_URL points at a server), and python3-venv if
# needed. Then it runs demo.py, which starts a throwaway redis-server unless REDIS_URL is set.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="${VENV:-$root/.venv}"
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

if [ ! -x "$venv/bin/python" ]; then
    if [ -z "$python" ]; then
        apt_install python3 python3-venv
        python="$(command -v python3)"
    fi
    echo "Creating the virtual environment $venv (nothing is installed into the system Python)..."
    "$python" -m venv "$venv" >/dev/null 2>&1 || {
        apt_install python3-venv
        rm -rf "$venv"
        "$python" -m venv "$venv"
    }
fi
if ! "$venv/bin/python" -c "import scrapy_redis, scrapy" >/dev/null 2>&1; then
    echo "Installing scrapy-redis from $root and its dependencies into $venv..."
    "$venv/bin/python" -m pip install -q -e "$root"
fi
echo "Using the virtual environment $venv"

exec "$venv/bin/python" "$here/demo.py" "$@"
