#!/usr/bin/env bash
# The whole test suite: static checks, unit tests and lab tests (the lab tests
# need root and podman; .ci/run makes their absence a failure). Arguments go
# to one pytest run as given, e.g. scripts/test.sh -m "not lab" -n 2 for the
# fast subset on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_root.sh
source scripts/_root.sh
become_root test.sh optional "$@"
scripts/bootstrap.sh
if [[ $# -eq 0 && "${SPARKCTL_LAB_BACKGROUND:-1}" != 0 && $EUID -eq 0 ]] && command -v podman >/dev/null; then
  # The lab's image and `lab up` are two minutes of debootstrap, podman and SSH waits:
  # they run beside the static checks and the first pass, and the second pass's lab
  # fixture takes their result (tests/lab_bringup.py, SPARKCTL_LAB_BROUGHT_UP in
  # tests/conftest.py). Whatever ends this script waits for them first, so no `lab up`
  # is left running behind it; a lab brought up for a second pass that never ran is
  # taken down again.
  bringup="$(mktemp --tmpdir sparkctl-bringup.XXXXXX)"
  .venv/bin/python -m tests.lab_bringup --image >"$bringup" 2>"$bringup.err" &
  bringup_pid=$!
  second_pass=0
  finish_bringup() {
    wait "$bringup_pid" 2>/dev/null || true
    if [[ $second_pass -eq 0 && "${SPARKCTL_KEEP_LAB:-0}" != 1 ]]; then
      .venv/bin/sparkctl lab down >/dev/null 2>&1 || true
    fi
    rm -f "$bringup" "$bringup.err"
  }
  trap finish_bringup EXIT
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy and ansible-lint (roles and playbooks: the production profile of .ansible-lint)
# each keep about one core busy, for 19 and 49 s on a 2-core machine with a cold mypy
# cache: they run side by side (54 s, not 68), each into a file of its own, shown in this
# order once both are done; the first failure's exit is the script's.
gates="$(mktemp -d --tmpdir sparkctl-gates.XXXXXX)"
.venv/bin/mypy >"$gates/mypy" 2>&1 &
mypy_pid=$!
PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint -q >"$gates/ansible-lint" 2>&1 &
lint_pid=$!
mypy_rc=0
lint_rc=0
wait "$mypy_pid" || mypy_rc=$?
wait "$lint_pid" || lint_rc=$?
cat "$gates/mypy" "$gates/ansible-lint"
rm -rf "$gates"
if [[ $mypy_rc -ne 0 ]]; then
  exit "$mypy_rc"
fi
if [[ $lint_rc -ne 0 ]]; then
  exit "$lint_rc"
fi
if [[ $# -gt 0 ]]; then
  exec .venv/bin/pytest "$@"
fi
# The whole suite, in two passes. The first: the unit and contract tiers on every core
# (pytest-xdist, one worker per test file). The second: the lab tier, its tests one at a
# time in order on one shared lab, and the modules marked host_processes (they read every
# process of this host, where a rank another test starts would count). Both passes run
# whatever the first one gives; the exit is the first failure's. The second pass lists
# its 60 slowest phases, where the suite's time goes (docs/benchmarks.md, "The test
# suite").
#
# With the lab brought up beside (above), the passes overlap: the first starts at once,
# at nice 10, and the second as soon as the lab is up. The lab's early tests wait on
# ssh, podman and shaped links as much as they compute, and the first pass fills those
# waits (the CPU it takes is the CPU they leave); the lab tests that measure bandwidth
# (quiet_host) and the host_processes modules wait until the first pass is over
# (SPARKCTL_FIRST_PASS_PID, tests/conftest.py), as they wait for the molecule scenarios.
# The first pass's output follows the second's. Without the lab, one pass after the other.
unit=0
rest=0
# The second pass collects only where its tests are, the lab and molecule tiers and the
# modules marked host_processes (found by their marker): collecting the whole tree to
# deselect its 4000 other tests took 10 s, these 1.4.
mapfile -t host_processes < <(grep -rlE 'mark\.host_processes' tests --include='*.py' | sort)
first_pass=(.venv/bin/pytest -m "not lab and not host_processes" -n "$(nproc)" --dist loadfile)
if [[ -z "${bringup_pid:-}" ]]; then
  "${first_pass[@]}" || unit=$?
else
  first="$(mktemp -d --tmpdir sparkctl-first-pass.XXXXXX)"
  # Its own state directory: nothing of the lab's (keys, results, plans) is the first
  # pass's, and no unit test's plan cache is written beside the lab's.
  (
    export SPARKCTL_STATE_DIR="$first/state"
    mkdir -p "$SPARKCTL_STATE_DIR"
    rc=0
    nice -n 10 "${first_pass[@]}" >"$first/out" 2>&1 || rc=$?
    echo "$rc" >"$first/rc"
  ) &
  first_pid=$!
  finish_first() {
    # Whatever ends this script ends the first pass too (its pytest, then the subshell),
    # then takes the lab down.
    pkill -TERM -P "$first_pid" 2>/dev/null || true
    wait "$first_pid" 2>/dev/null || true
    rm -rf "$first"
    finish_bringup
  }
  trap finish_first EXIT
  echo "test.sh: the first pass (unit and contract tiers) runs beside the lab's; its output follows the second pass's"
  wait "$bringup_pid" || true
  second_pass=1
  export SPARKCTL_LAB_BROUGHT_UP="$bringup"
  export SPARKCTL_FIRST_PASS_PID="$first_pid"
fi
.venv/bin/pytest -m "lab or host_processes" --durations=60 tests/lab tests/molecule \
  "${host_processes[@]}" || rest=$?
if [[ -n "${first_pid:-}" ]]; then
  wait "$first_pid" || true
  echo "test.sh: the first pass (unit and contract tiers), run beside the second:"
  cat "$first/out"
  unit="$(cat "$first/rc" 2>/dev/null || echo 1)"
fi
if [[ $unit -ne 0 ]]; then
  exit "$unit"
fi
exit "$rest"
