#!/usr/bin/env bash
# Set up what sparkctl needs on a fresh Debian/Ubuntu machine:
#   - system packages for the rehearsal lab (podman with runc, debootstrap,
#     iproute2, ssh), installed with apt when run as root, or named precisely
#     otherwise (exit 4, the "environment missing" code);
#   - the virtualenv at .venv with sparkctl, its rehearsal lab (lab/) and the
#     development tools.
# Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# prometheus: for promtool, which the alert rules' tests run (tests/unit/test_alert_rules.py).
# On a host whose init runs services, Debian's package starts a Prometheus server (port 9090)
# and recommends prometheus-node-exporter (9100): `systemctl disable --now prometheus` if
# this machine should not run one.
packages=(podman runc netavark aardvark-dns debootstrap iproute2 iptables nftables openssh-client util-linux tar prometheus)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: missing system packages: ${missing[*]}" >&2
    echo "bootstrap: install them as root: apt-get install ${missing[*]}" >&2
    exit 4
  fi
fi

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "bootstrap: sparkctl needs Python >= 3.11 ($python is $("$python" -V 2>&1))" >&2
  exit 4
fi
if [[ ! -x .venv/bin/python ]]; then
  if ! "$python" -m venv .venv 2>/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      rm -rf .venv && "$python" -m venv .venv
    else
      echo "bootstrap: cannot create .venv; install python3-venv" >&2
      exit 4
    fi
  fi
fi
# Reinstall only when the dependency list changed.
stamp=.venv/.sparkctl-deps
want=$(cat pyproject.toml lab/pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "bootstrap: installing sparkctl and its tools into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  # sparkctl and its rehearsal lab, a distribution of its own (lab/, sparkctl-lab).
  .venv/bin/python -m pip install -q -e '.[dev]' -e ./lab
  echo "$want" > "$stamp"
fi
