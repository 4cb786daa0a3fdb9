# Sourced by the README's two commands: everything a fresh machine needs, idempotently.
# A Python 3.11+ venv with Strata installed, a JDK and Maven (Kafka's jars come from Maven
# Central on first use and are cached under ~/.cache/strata).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_package() {  # need_package COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $2 (for $1)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    echo "strata: $1 is needed; install the Debian package $2" >&2
    exit 1
  fi
}
need_package java openjdk-17-jre-headless
need_package mvn maven

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "strata: Python 3.11+ is needed" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.strata-installed
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing Strata and its dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2
  .venv/bin/python -m pip install -q -e '.[test]' >&2
  echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
