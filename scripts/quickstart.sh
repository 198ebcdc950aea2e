#!/usr/bin/env bash
# The whole job on the rehearsal lab, from a fresh machine: set up, build the
# lab image, bring four simulated Sparks and a switch up, and run on them what
# sparkctl can do so far. Run as root (the lab wires veth pairs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
sparkctl=.venv/bin/sparkctl

"$sparkctl" lab up
"$sparkctl" lab status
"$sparkctl" provision inventory/sim.ini
"$sparkctl" validate inventory/sim.ini

state=${SPARKCTL_STATE_DIR:-$HOME/.local/state/sparkctl}
cat <<MSG

The lab is up, provisioned and validated. Inventory: inventory/sim.ini
  validation report:                  $state/results/sim/last-good/report.html
  lab state, SSH key and known_hosts: $state/lab/
  a shell on a node:                  $sparkctl lab ssh spark1
  take it down:                       $sparkctl lab down
MSG
