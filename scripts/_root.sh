# Sourced by scripts/quickstart.sh and scripts/test.sh, so the README's commands
# are the same for root and for a sudo user: the lab wires veth pairs between
# container namespaces and installs system packages, which takes root.
#   become_root NAME required "$@"
# As root: nothing. Otherwise, where sudo exists: run the script again through
# sudo with this environment (SPARKCTL_*, PATH). Without sudo: a required root
# is exit 4 (the "environment missing" code) saying so; otherwise the script goes
# on unprivileged (the lab's tests then skip, or fail under SPARKCTL_REQUIRE_LAB=1).
become_root() {
  local name=$1 required=$2
  shift 2
  [[ $EUID -eq 0 ]] && return 0
  if command -v sudo >/dev/null; then
    exec sudo -E -- "$PWD/scripts/${0##*/}" "$@" # the caller has cd-ed to the checkout
  fi
  if [[ $required == required ]]; then
    echo "$name: needs root (the lab wires veth pairs between container namespaces);" \
      "run it as root, or as a user with sudo" >&2
    exit 4
  fi
  echo "$name: not root and no sudo: the lab's tests will not run" >&2
}
