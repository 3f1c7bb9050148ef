#!/usr/bin/env bash
# Sourced by scripts/mqlab and scripts/test: make sure .venv exists and holds this project.
# Creates .venv at the repo root on first use and reinstalls when pyproject.toml, setup.py or a
# compiled module's C source (nodes/**/_*.c, _*.h, harness/_wall_shift.c) changes.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
STAMP="$VENV/.mqlab-installed"
PYTHON="${PYTHON:-python3}"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "mqlab needs Python 3.11+ ($PYTHON not found); install python3 and retry" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "mqlab: creating $VENV (first run)..." >&2
  "$PYTHON" -m venv "$VENV"
fi
# The compiled codecs (setup.py: nodes/**/_*.c) need a C compiler, Python's
# headers and zlib's; without them the install still succeeds and the same code paths run
# in Python, slower. The wall-clock shift library of the clock faults (harness/_wall_shift.c) is
# built with them; without it, nodes with wall-clock control refuse to start, saying so.
build_pkgs=()
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || build_pkgs+=(gcc)
"$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || build_pkgs+=(python3-dev)
[ -f /usr/include/zlib.h ] || build_pkgs+=(zlib1g-dev)
if [ "${#build_pkgs[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "mqlab: installing ${build_pkgs[*]} for the compiled record codecs (apt-get)..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${build_pkgs[@]}"; } >&2 \
      || echo "mqlab: apt-get could not install ${build_pkgs[*]}; records will be encoded and decoded in Python" >&2
  else
    echo "mqlab: the compiled record codecs need ${build_pkgs[*]}: apt-get install -y ${build_pkgs[*]}" >&2
  fi
fi
# reinstall when the project's metadata or a compiled module's source changes
want="$(cat "$REPO/pyproject.toml" "$REPO/setup.py" $(find "$REPO/nodes" "$REPO/harness" -name '_*.[ch]' | sort) | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  echo "mqlab: installing the project with its dev extra into .venv..." >&2
  # -qq: errors only (one -q still prints a warning per package for index locations this
  # machine's pip config names but does not have, and the editable build's banner)
  "$VENV/bin/python" -m pip install -qq --upgrade pip >&2
  "$VENV/bin/python" -m pip install -qq -e "$REPO[dev]" >&2
  echo "$want" > "$STAMP"
fi
# The checker runs on Spark, which needs a Java 17+ runtime on PATH.
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "mqlab: installing Java 17 for the checker (apt-get)..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; } >&2
  else
    echo "mqlab: no java on PATH; the checker needs it: apt-get install -y openjdk-17-jre-headless" >&2
  fi
fi
# `mqlab bench pull --peers redis` measures Redis Streams beside mqlab: it needs redis-server.
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "mqlab: installing redis-server for the benchmark's Redis rows (apt-get)..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } >&2 \
      || echo "mqlab: apt-get could not install redis-server; bench --peers redis needs it" >&2
  else
    echo "mqlab: no redis-server on PATH; bench --peers redis needs it: apt-get install -y redis-server" >&2
  fi
fi
# The `mqlab serve` browser test drives Debian's Chromium headless (Playwright, told its path,
# never downloads a browser of its own).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "mqlab: installing chromium for the web view's browser test (apt-get)..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&2 \
      || echo "mqlab: apt-get could not install chromium; the mqlab serve browser test needs it" >&2
  else
    echo "mqlab: no /usr/bin/chromium; the mqlab serve browser test needs it: apt-get install -y chromium" >&2
  fi
fi
# The JavaScript clients run under node, each pinned by the package-lock.json of its own directory
# and installed beside it (npm ci), reinstalled when that lock file changes:
# - chaos/real_clients/js: ali-ons, a RocketMQ 4.x client, the real-client consumer of
#   `mqlab chaos run SUITE --client ons` and of the interop tests;
# - chaos/real_clients/node5: Apache's RocketMQ 5 Node.js client (rocketmq-client-nodejs), the
#   interop tests' Node.js 5.x producer and consumers.
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "mqlab: installing node and npm for the interop tests (apt-get)..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } >&2
  else
    echo "mqlab: no npm on PATH; --client ons and the interop tests need it: apt-get install -y nodejs npm" >&2
  fi
fi
npm_ci() {  # npm_ci DIR WHAT WHO_NEEDS_IT
  local dir="$1" stamp="$1/node_modules/.mqlab-installed" want
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "mqlab: installing $2 (npm ci in ${dir#"$REPO"/})..." >&2
    # a failed npm ci must not stop `mqlab`: only $3 need the client, and they fail saying how
    # to install it
    if (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) >&2; then
      echo "$want" > "$stamp"
    else
      echo "mqlab: npm ci in ${dir#"$REPO"/} failed; $3 need it" >&2
    fi
  fi
}
if command -v npm >/dev/null 2>&1; then
  npm_ci "$REPO/chaos/real_clients/js" "the JavaScript RocketMQ client" "--client ons and the interop tests"
  npm_ci "$REPO/chaos/real_clients/node5" "the RocketMQ 5 Node.js client" "the RocketMQ 5 Node.js interop tests"
fi
# Apache's RocketMQ 5 Python client (the interop tests' 5.x producer) lives in its own venv,
# .venv-py5: its package `rocketmq` is also the 4.x C++ binding's name in .venv, and its
# apache.rocketmq.v2 descriptors cannot share a process with the broker's. Pinned by
# chaos/real_clients/py5/requirements.txt; reinstalled when that file changes.
PY5_VENV="$REPO/.venv-py5"
PY5_REQS="$REPO/chaos/real_clients/py5/requirements.txt"
PY5_STAMP="$PY5_VENV/.mqlab-installed"
want_py5="$(sha256sum "$PY5_REQS" | cut -d' ' -f1)"
if [ ! -f "$PY5_STAMP" ] || [ "$(cat "$PY5_STAMP")" != "$want_py5" ]; then
  echo "mqlab: installing the RocketMQ 5 Python client into .venv-py5..." >&2
  # a failed install must not stop `mqlab`: only the RocketMQ 5 interop tests need it, and they
  # fail saying how to install it
  if { [ -x "$PY5_VENV/bin/python" ] || "$PYTHON" -m venv "$PY5_VENV"; } \
      && "$PY5_VENV/bin/python" -m pip install -qq -r "$PY5_REQS" >&2; then
    echo "$want_py5" > "$PY5_STAMP"
  else
    echo "mqlab: installing .venv-py5 failed; the RocketMQ 5 interop tests need it" >&2
  fi
fi
