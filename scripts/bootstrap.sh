# Sourced by scripts/mqlab and scripts/test: make sure .venv exists and holds this project.
# Creates .venv at the repo root on first use and reinstalls when pyproject.toml changes.
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
want="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  echo "mqlab: installing the project with its dev extra into .venv..." >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet -e "$REPO[dev]" >&2
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
