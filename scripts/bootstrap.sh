#!/usr/bin/env bash
# Make this checkout ready to run: system packages (only those missing), then .venv with the
# project installed editable. Idempotent: a second run on a ready machine installs nothing.
#
#   scripts/bootstrap.sh [extra ...]    extras from pyproject.toml, e.g. "spark"
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

PY=${PYTHON:-python3}
missing=()
command -v "$PY" >/dev/null 2>&1 || missing+=(python3)
if command -v "$PY" >/dev/null 2>&1 && ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)  # ZooKeeper and Spark
dpkg -s zookeeper >/dev/null 2>&1 || missing+=(zookeeper)           # the real ZooKeeper server
command -v kcat >/dev/null 2>&1 || missing+=(kcat)                  # a Kafka client in tests
command -v gcc >/dev/null 2>&1 || missing+=(gcc python3-dev)        # wheels that compile
# The web console's browser test (dev extra: playwright drives Debian's chromium; never
# `playwright install`, which downloads a browser build of its own).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)                # kafkajs in tests/js
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  apt_install "${missing[@]}"
fi

extras="dev"
for e in "$@"; do extras="$extras,$e"; done
stamp=".venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)-${extras//,/-}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing tidelog[$extras] into .venv"
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install -q -e ".[$extras]" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import tidelog, kio, crc32c" # fail loudly if the install did not take
  if [[ ",$extras," == *",spark,"* ]]; then
    # The spark extra: pyspark with its Spark Connect client (grpc, pandas) and pyarrow.
    .venv/bin/python -c "import pyspark, pyarrow, grpc, grpc_status, pandas"
  fi
  touch "$stamp"
fi

# kafkajs, the JS client family of the integration tests, pinned by tests/js/package-lock.json
# (which names no registry: the npm client's own registry setting applies). `npm ci` again
# only when the lock file changed.
js_stamp="tests/js/node_modules/.installed-$(sha1sum <tests/js/package-lock.json | cut -c1-12)"
if [ ! -f "$js_stamp" ]; then
  echo "bootstrap: installing tests/js packages (npm ci)"
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
  touch "$js_stamp"
fi
