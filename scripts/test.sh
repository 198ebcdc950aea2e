#!/usr/bin/env bash
# The whole test suite: static checks, unit tests and lab tests (the lab tests
# need root and podman; .ci/run makes their absence a failure). Arguments go
# to one pytest run as given, e.g. scripts/test.sh -m "not lab" -n 2 for the
# fast subset on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Roles and playbooks: the production profile of .ansible-lint.
PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint -q
if [[ $# -gt 0 ]]; then
  exec .venv/bin/pytest "$@"
fi
# The whole suite, in two passes. First the unit and contract tiers on every core
# (pytest-xdist, one worker per test file). Then, one at a time, the lab tier (its
# tests share one lab in order, and its bandwidth gates want a quiet host) and the
# modules marked host_processes (they read every process of this host, where a rank
# another test starts would count). Both passes run whatever the first one gives;
# the exit is the first failure's.
unit=0
rest=0
.venv/bin/pytest -m "not lab and not host_processes" -n "$(nproc)" --dist loadfile || unit=$?
.venv/bin/pytest -m "lab or host_processes" || rest=$?
if [[ $unit -ne 0 ]]; then
  exit "$unit"
fi
exit "$rest"
