#!/usr/bin/env bash
# The LangGraph + PostgreSQL peer of agentd-bench (docs/performance.md, "The LangGraph peer").
#
#   bash benches/peer/run.sh --tasks N --steps K --concurrency C [--llm-latency-ms L] [...]
#   bash benches/peer/run.sh --setup     make (or refresh) the venv only
#   bash benches/peer/run.sh --help      every option
#
# Makes the venv target/peer-venv from benches/peer/requirements.txt (every version pinned;
# PyPI is the only network it needs, at install time) when it is missing or the
# requirements changed, then runs the peer: one JSON line on stdout, progress on stderr.
# PYTHON picks the interpreter that makes the venv (3.10 or newer; default python3),
# PEER_VENV another venv folder, PEER_ADMIN_URL another PostgreSQL (default
# postgresql://postgres@127.0.0.1:5432/postgres).
# Exit status: 0 done, 1 the run failed, 2 the environment is not ready.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${PEER_VENV:-$root/target/peer-venv}
python=${PYTHON:-python3}

case "${1:-}" in
  -h|--help)
    # The options come from argparse, which needs no package: no venv for this.
    exec "$python" "$here/peer_bench.py" --help
    ;;
esac

fail() {
  echo "benches/peer/run.sh: $*" >&2
  exit 2
}

make_venv() {
  command -v "$python" >/dev/null 2>&1 || fail "no $python: install Python 3.10+ or set PYTHON"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "$python is $("$python" --version 2>&1); LangGraph needs 3.10 or newer (set PYTHON)"
  echo "[peer] making $venv from requirements.txt (PyPI)" >&2
  "$python" -m venv --clear "$venv" \
    || fail "cannot make a venv in $venv with $python (see above; on Debian without ensurepip: apt-get install python3-venv)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" \
    || fail "installing requirements.txt into $venv failed (is PyPI reachable? see pip's message above)"
}

stamp="$venv/.requirements.sha256"
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  make_venv
  echo "$want" > "$stamp"
fi
if [ "${1:-}" = "--setup" ]; then
  echo "[peer] venv ready: $venv" >&2
  exit 0
fi
exec "$venv/bin/python" "$here/peer_bench.py" "$@"
