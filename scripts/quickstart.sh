#!/usr/bin/env bash
# The whole job on the rehearsal lab, from a fresh machine: set up, build the
# lab image, bring four simulated Sparks and a switch up, and run on them what
# sparkctl can do. As root, or as a sudo user (it runs itself through sudo:
# the lab wires veth pairs).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_root.sh
source scripts/_root.sh
become_root quickstart required "$@"
scripts/bootstrap.sh
sparkctl=.venv/bin/sparkctl

"$sparkctl" lab up
"$sparkctl" lab status
# A small synthetic model on the head; `up` fans it out while provisioning.
"$sparkctl" lab model --size 64MiB --files 2 --dir /srv/sparkctl-model/synthetic
# The whole job: provision, validate, serve up (TP=4 over the four nodes), serve verify.
"$sparkctl" up inventory/sim.ini -e model_cache_source=head \
  -e model_cache_head_dir=/srv/sparkctl-model/synthetic

state=${SPARKCTL_STATE_DIR:-$HOME/.local/state/sparkctl}
cat <<MSG

The lab is up, provisioned, validated and serving. Inventory: inventory/sim.ini
  validation report:                  $state/results/sim/last-good/report.html
  the endpoint (OpenAI API):          http://10.77.0.11:30000/v1 (key: $state/clusters/sim/secrets/sglang-api-key)
  check it again:                     $sparkctl serve verify inventory/sim.ini
  stop it:                            $sparkctl serve down inventory/sim.ini
  lab state, SSH key and known_hosts: $state/lab/
  a shell on a node:                  $sparkctl lab ssh spark1
  take it down:                       $sparkctl lab down
MSG
