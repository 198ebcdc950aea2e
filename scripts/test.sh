#!/usr/bin/env bash
# The whole test suite: static checks, unit tests and lab tests (the lab tests
# need root and podman; .ci/run makes their absence a failure). Arguments go
# to pytest, e.g. scripts/test.sh -m "not lab" for the fast subset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Roles and playbooks: the production profile of .ansible-lint.
PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint -q
exec .venv/bin/pytest "$@"
