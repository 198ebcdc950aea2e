"""Hardening switches need an explicit opt-in: ``preflight_accepted_risks``.

What turns off one of the roles' protections is refused unless the inventory lists it
by name in ``preflight_accepted_risks`` (roles/preflight declares it, default ``[]``):
the SGLang server as root, an environment variable that loads code into a process,
plain http for a package index or for an endpoint that gets a token, container
arguments that give the container the host's root. :func:`accepted_risks` says which
of them an inventory accepted, for ``inventory check`` to print every time.
"""

from __future__ import annotations

import difflib
import os
import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .common import Problem

RISKS_VAR = "preflight_accepted_risks"
# Risk -> what accepting it allows (the choices of preflight_accepted_risks in
# roles/preflight/meta/argument_specs.yml: keep the two lists the same).
RISKS: dict[str, str] = {
    "sglang_as_root": "the SGLang server runs as root",
    "loader_env": "an environment variable loads code into the server or NCCL",
    "plain_http": "a package index, or an endpoint that gets the token, is reached over plain http",
    "container_host_root": "the server's container gets the host's root",
}
HINT = (
    f"if this is meant, list {{risk}} in {RISKS_VAR} (a list, in group_vars); "
    "see docs/provision.md, accepted risks"
)

# Mappings the roles write into environment files (sglang_env_file, nccl.env, nccl.conf).
ENV_MAPS = ("sglang_env_extra", "nccl_env_extra", "nccl_env_overrides")
CONTAINER_ARGS = "sglang_container_extra_args"
# Variables that make a dynamic loader, an interpreter or NCCL load code of the value's
# choosing (ld.so(8), python(1) ENVIRONMENT, bash(1) BASH_ENV, NCCL's plugin variables:
# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
LOADER_ENV = frozenset(
    {
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONINSPECT",
        "PYTHONBREAKPOINT",
        "PYTHONWARNINGS",
        "BASH_ENV",
        "ENV",
        "PATH",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "RUBYLIB",
        "RUBYOPT",
        "NODE_OPTIONS",
        "GCONV_PATH",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_ENV_PLUGIN",
    }
)
# Host paths a container must not see: the host's root through them (its files, its
# keys, its engine's socket, its devices and kernel interfaces).
_HOST_ROOT_PATHS = (
    "/",
    "/etc",
    "/root",
    "/home",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/var",
    "/var/lib",
    "/run",
    "/var/run",
    "/proc",
    "/sys",
    "/dev",
)
_SHM = "/dev/shm"  # noqa: S108 - a path judged, not used
_HOST_ROOT_TREES = ("/etc", "/root", "/boot", "/proc", "/sys", "/dev", "/var/lib/docker")
_DEVICE = re.compile(
    r"/dev/(?:mem|kmem|port|sd[a-z]+\d*|vd[a-z]+\d*|nvme\d+(?:n\d+(?:p\d+)?)?|dm-\d+|"
    r"loop\d+|mapper(?:/.*)?|disk/.*|kvm|cpu/.*|dri/?.*)"
)
_CAPS = frozenset(
    {
        "ALL",
        "SYS_ADMIN",
        "SYS_MODULE",
        "SYS_PTRACE",
        "SYS_RAWIO",
        "SYS_BOOT",
        "DAC_READ_SEARCH",
        "DAC_OVERRIDE",
        "NET_ADMIN",
        "BPF",
        "PERFMON",
    }
)


@dataclass(frozen=True)
class Finding:
    risk: str
    var: str
    what: str


def _words(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def _options(words: list[str]) -> Iterator[tuple[str, str]]:
    """(flag, value) of each ``--flag=value``, ``--flag value`` or ``-fvalue`` word pair."""
    for index, word in enumerate(words):
        if not word.startswith("-"):
            continue
        if word.startswith("--") and "=" in word:
            flag, value = word.split("=", 1)
        elif word.startswith("--") or len(word) == 2:
            flag = word
            value = words[index + 1] if index + 1 < len(words) else ""
        else:
            flag, value = word[:2], word[2:]
        yield flag, value


def _host_root_source(source: str) -> bool:
    if not source.startswith("/"):
        return False
    path = posixpath.normpath(source)
    if path.endswith(".sock") or path in _HOST_ROOT_PATHS:
        return True
    if path == _SHM or path.startswith(f"{_SHM}/"):
        return False  # the server's shared memory (tmpfs): no host file behind it
    return any(path.startswith(f"{tree}/") for tree in _HOST_ROOT_TREES)


def _mount_source(flag: str, value: str) -> str | None:
    if flag in ("-v", "--volume"):
        return value.split(":", 1)[0]
    if flag == "--mount":
        fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        return fields.get("source") or fields.get("src")
    return None


def _loader(name: str) -> bool:
    return name in LOADER_ENV or name.startswith("LD_")


def _container_findings(words: list[str]) -> Iterator[Finding]:
    var = CONTAINER_ARGS
    for flag, value in _options(words):
        low = value.lower()
        if flag == "--privileged" and low not in ("false", "0"):
            yield Finding("container_host_root", var, "--privileged")
        elif flag in ("--pid", "--userns", "--uts", "--cgroupns") and low == "host":
            yield Finding("container_host_root", var, f"{flag}=host")
        elif flag == "--cap-add":
            caps = {c.strip().upper().removeprefix("CAP_") for c in value.split(",")}
            if caps & _CAPS:
                yield Finding("container_host_root", var, f"--cap-add={value}")
        elif flag == "--security-opt" and re.search(r"unconfined|disable|privileges=false", low):
            yield Finding("container_host_root", var, f"--security-opt={value}")
        elif flag == "--device" and _DEVICE.fullmatch(value.split(":", 1)[0]):
            yield Finding("container_host_root", var, f"--device={value.split(':', 1)[0]}")
        elif flag == "--device-cgroup-rule":
            yield Finding("container_host_root", var, "--device-cgroup-rule")
        elif (source := _mount_source(flag, value)) is not None and _host_root_source(source):
            yield Finding("container_host_root", var, f"{flag} {source}")
        elif flag in ("-u", "--user") and value.split(":", 1)[0] in ("0", "root"):
            yield Finding("sglang_as_root", var, f"{flag} {value}")
        elif flag in ("-e", "--env") and _loader(value.split("=", 1)[0]):
            yield Finding("loader_env", var, f"{flag} {value.split('=', 1)[0]}")


def _env_keys(value: Any) -> Iterator[tuple[str, Any]]:
    """(key, value) of an env map and of mappings nested in it (nccl_env_overrides)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key), item
            yield from _env_keys(item)


def _token_set(hv: Mapping[str, Any]) -> bool:
    """A Hugging Face token goes with the model download: the inventory's, or (the role's
    default) HF_TOKEN of the controller's environment."""
    if "model_cache_hf_token" in hv:
        return bool(hv["model_cache_hf_token"])
    return bool(os.environ.get("HF_TOKEN"))


_INDEX_FLAGS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links")


def _http(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith("http://")


def findings(hv: Mapping[str, Any]) -> list[Finding]:
    """Every hardening switch one host's variables turn, accepted or not."""
    found: list[Finding] = []
    if "sglang_user" in hv and hv["sglang_user"] in ("", "root"):
        found.append(Finding("sglang_as_root", "sglang_user", f"sglang_user {hv['sglang_user']!r}"))
    token = _token_set(hv)
    for var in ENV_MAPS:
        for key, value in _env_keys(hv.get(var)):
            if _loader(key):
                found.append(Finding("loader_env", var, key))
            elif key == "HF_ENDPOINT" and token and _http(value):
                found.append(Finding("plain_http", var, "HF_ENDPOINT http:// with a token"))
    if token and _http(hv.get("model_cache_hf_endpoint")):
        found.append(
            Finding("plain_http", "model_cache_hf_endpoint", "http:// with a Hugging Face token")
        )
    for flag, value in _options(_words(hv.get("sglang_pip_extra_args"))):
        if flag in _INDEX_FLAGS and _http(value):
            found.append(Finding("plain_http", "sglang_pip_extra_args", f"{flag} http://"))
        elif flag == "--trusted-host":
            found.append(Finding("plain_http", "sglang_pip_extra_args", "--trusted-host"))
    found += _container_findings(_words(hv.get(CONTAINER_ARGS)))
    mounts = hv.get("sglang_model_mounts")
    for source in mounts if isinstance(mounts, list) else []:
        if isinstance(source, str) and _host_root_source(source):
            found.append(Finding("container_host_root", "sglang_model_mounts", source))
    return found


def _accepted(hv: Mapping[str, Any]) -> list[str]:
    value = hv.get(RISKS_VAR)
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def check_risks(
    groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """Each hardening switch a host turns that its ``preflight_accepted_risks`` does not
    list, and names in that list that are no risk; a problem every host shares is
    reported once. Every host of ``hostvars`` is judged (``groups`` is taken for the
    rules' common signature)."""
    del groups
    per_host: dict[str, list[Problem]] = {}
    for host, hv in hostvars.items():
        accepted = _accepted(hv)
        problems = per_host.setdefault(host, [])
        for name in accepted:
            if name not in RISKS:
                close = difflib.get_close_matches(name, RISKS, n=1)
                problems.append(
                    Problem(
                        host,
                        RISKS_VAR,
                        f"{name!r} is not a risk sparkctl knows ({', '.join(RISKS)})",
                        hint=f"did you mean {close[0]}?" if close else None,
                    )
                )
        problems += [
            Problem(
                host,
                finding.var,
                f"{finding.what}: {RISKS[finding.risk]}, a hardening switch that is "
                f"refused unless {RISKS_VAR} lists {finding.risk}",
                hint=HINT.format(risk=finding.risk),
            )
            for finding in findings(hv)
            if finding.risk not in accepted
        ]
    out: list[Problem] = []
    seen: set[tuple[str | None, str]] = set()
    for host, problems in per_host.items():
        for problem in problems:
            everywhere = all(
                any(q.var == problem.var and q.message == problem.message for q in others)
                for others in per_host.values()
            )
            key = (None if everywhere else host, f"{problem.var}: {problem.message}")
            if key not in seen:
                seen.add(key)
                out.append(replace(problem, host=key[0]))
    return out


def accepted_risks(hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per risk an inventory accepts: what it allows, which hosts list it and
    what of it is in use (``inventory check`` prints them whenever it passes too)."""
    lines: list[str] = []
    for risk, allows in RISKS.items():
        hosts = [h for h, hv in hostvars.items() if risk in _accepted(hv)]
        if not hosts:
            continue
        used = sorted(
            {f"{f.var}: {f.what}" for h in hosts for f in findings(hostvars[h]) if f.risk == risk}
        )
        who = "all hosts" if len(hosts) == len(hostvars) else f"hosts {', '.join(hosts)}"
        lines.append(
            f"accepted risk {risk} ({allows}) on {who}: "
            + ("; ".join(used) if used else "listed, not in use")
        )
    return lines
