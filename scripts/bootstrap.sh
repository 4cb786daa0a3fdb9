# Sourced by the README's two commands: everything a fresh machine needs, idempotently.
# A Python 3.11+ venv with Strata installed, a JDK and Maven (Kafka's jars come from Maven
# Central on first use and are cached under ~/.cache/strata), PostgreSQL's binaries (the
# local stack runs its own server on port 15432 for the tests of the SQL checkpoint store) and
# Prometheus' (its own server on port 19090 scrapes the stack's processes in the tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

have() {  # have COMMAND, or have '/a/glob/of/a/file'
  case "$1" in
    /*) compgen -G "$1" >/dev/null ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

need_package() {  # need_package COMMAND_OR_PATH_GLOB DEBIAN_PACKAGE [APT-GET OPTION...]
  have "$1" && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $2 (for $1)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${@:3}" "$2" >/dev/null
  else
    echo "strata: $1 is needed; install the Debian package $2" >&2
    exit 1
  fi
}
need_package java openjdk-17-jre-headless
need_package mvn maven
if ! have '/usr/lib/postgresql/*/bin/initdb' && [ "$(id -u)" = 0 ]; then
  # Only the binaries are wanted: tell postgresql-common (installed first) not to create the
  # "main" cluster on port 5432 that it would otherwise make, and maybe start, for the new server.
  need_package pg_createcluster postgresql-common
  sed -i 's/^#\?\s*create_main_cluster\s*=.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf
fi
need_package '/usr/lib/postgresql/*/bin/initdb' postgresql

keep_service_off() {  # keep_service_off NAME: a package's own server; the local stack runs its own
  if [ -d /run/systemd/system ]; then
    systemctl disable --now "$1" >/dev/null 2>&1 || true
  else  # no systemd running: the package's SysV script may have started it
    if [ -x "/etc/init.d/$1" ]; then "/etc/init.d/$1" stop >/dev/null 2>&1 || true; fi
    # offline, this disables the SysV links and the systemd unit both, for whichever boots next
    systemctl disable "$1" >/dev/null 2>&1 || update-rc.d "$1" disable >/dev/null 2>&1 || true
  fi
}
if ! have prometheus; then
  # without the recommended node exporter: nothing here scrapes the machine itself
  need_package prometheus prometheus --no-install-recommends
  keep_service_off prometheus  # it would scrape itself on port 9090 for good
fi
# Containers for tests/deploy/test_image.py (docs/container.md): podman on runc (crun fails on this VM's
# hybrid cgroups), podman-compose for compose.yaml, debootstrap for the local base image
need_package runc runc
need_package podman podman
need_package podman-compose podman-compose
need_package debootstrap debootstrap
# the web UI's browser tests (tests/ui/test_ui.py): Playwright drives Debian's Chromium
need_package chromium chromium

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
