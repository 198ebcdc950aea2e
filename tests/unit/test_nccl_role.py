"""The nccl role: its interface, the GID-index module, the env filters and the template.

The GID-table parser is tested on real ``show_gids`` output copied from public
sources (quoted below with where they come from), on the lab's own
``show_gids`` stand-in run against a fake node, and on a fake sysfs tree.
"""

# ruff: noqa: E501 -- captured command output is quoted as printed (long lines)
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.unit.pathload import load_file
from tests.unit.role_templates import template_env

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "nccl"


_load = load_file


envf = _load("nccl_env_filters", ROLE.parents[1] / "plugins" / "filter" / "nccl_env.py")
# The sink filters the template writes every line through, as Ansible loads them.
SINKS = _load("nccl_sink_filters", ROLE.parents[1] / "plugins" / "filter" / "sparkctl_sinks.py")


# ------------------------------------------------------------ interface
def _yaml(path: Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_standin_prints_the_pinned_nccl_tests_release() -> None:
    standin = (REPO / "lab" / "sparkctl_lab" / "standins" / "nccl_tests.py").read_text()
    pinned = str(_yaml(ROLE / "defaults" / "main.yml")["nccl_tests_version"]).lstrip("v")
    assert f'NCCL_TESTS_VERSION = "{pinned}"' in standin


# ------------------------------------------------------ env files, template
def test_parse_env_reads_what_nccl_reads() -> None:
    text = "# comment\n\nNCCL_IB_HCA==rocep1s0f1,roceP2p1s0f1\nNCCL_IB_GID_INDEX=3\r\n"
    assert envf.nccl_parse_env(text) == {
        "NCCL_IB_HCA": "=rocep1s0f1,roceP2p1s0f1",
        "NCCL_IB_GID_INDEX": "3",
    }
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        envf.nccl_parse_env("export NCCL_IB_GID_INDEX=3\n")
    with pytest.raises(ValueError, match="set twice"):
        envf.nccl_parse_env("A=1\nA=2\n")


def test_env_problems_reject_what_readers_would_disagree_on() -> None:
    assert (
        envf.nccl_env_problems(
            {"NCCL_IB_HCA": "^mlx5_0", "NCCL_DEBUG": "WARN", "NCCL_IB_GID_INDEX": 3}
        )
        == []
    )
    problems = envf.nccl_env_problems(
        {"NCCL_DEBUG_FILE": "/tmp/a b", "bad-key": "1", "NCCL_X": None, "NCCL_Y": '"q"'}
    )
    assert len(problems) == 4


def test_env_diff_names_each_difference() -> None:
    diff = envf.nccl_env_diff({"A": "1", "B": "2", "C": "x"}, {"A": 1, "B": "3", "D": "4"})
    assert diff == [
        "D is missing (expected '4')",
        "C='x' is not expected here",
        "B='2', expected '3'",
    ]


def test_template_renders_what_the_parser_reads_back() -> None:
    env = template_env(ROLE, [SINKS.FilterModule().filters()])
    values = {
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_GID_INDEX": 3,
        "NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1",
    }
    text = env.get_template("nccl-env.j2").render(
        __nccl_env_render=values, __nccl_env_purpose="Read by NCCL at init."
    )
    assert envf.nccl_parse_env(text) == {k: str(v) for k, v in values.items()}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments and all("=" not in line for line in comments)
    assert text.splitlines()[2:] == [
        "NCCL_IB_GID_INDEX=3",
        "NCCL_IB_HCA=rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1",
        "NCCL_SOCKET_IFNAME=enp1s0f1np1",
    ]


# ------------------------------------------------------------ verify: one judgement
_USAGE = (
    "USAGE: {name} \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n"
    "\t[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n"
)
_ENV = {"NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "fab0"}
_CONF = {"NCCL_IB_GID_INDEX": "3"}
_VER = {"NCCL_VERSION": "none"}
_BINS = ["all_reduce_perf", "all_gather_perf"]


def _text(env: dict[str, str]) -> str:
    return "# Managed by sparkctl\n" + "".join(f"{k}={v}\n" for k, v in env.items())


def _nccl_reading() -> dict[str, object]:
    files: dict[str, object] = {
        "/etc/sparkctl/nccl.env": {"exists": True, "content": _text(_ENV)},
        "/etc/nccl.conf": {"exists": True, "content": _text(_CONF)},
        "/etc/sparkctl/nccl-version.env": {"exists": True, "content": _text(_VER)},
    }
    cmds: dict[str, object] = {
        "mpirun --version": {"rc": 0, "stdout": "mpirun (Open MPI) 4.1.4\n", "stderr": ""}
    }
    for name in _BINS:
        files[f"/opt/nccl-tests/build/{name}"] = {"exists": True, "executable": True}
        cmds[name] = {"rc": 0, "stdout": _USAGE.format(name=name), "stderr": ""}
    return {"files": files, "commands": cmds}


def _nccl_want(**extra: object) -> dict[str, object]:
    return {
        "files": {
            "/etc/sparkctl/nccl.env": _ENV,
            "/etc/nccl.conf": _CONF,
            "/etc/sparkctl/nccl-version.env": _VER,
        },
        "env_file": "/etc/sparkctl/nccl.env",
        "gid_index": 3,
        "tests_dir": "/opt/nccl-tests",
        "binaries": _BINS,
        "lib_path": "",
        "nccl_home": "",
        **extra,
    }


def test_verify_problems_none_on_a_node_as_the_role_left_it() -> None:
    assert envf.nccl_verify_problems(_nccl_reading(), _nccl_want()) == []


def test_verify_problems_names_each_fault() -> None:
    reading = _nccl_reading()
    files = reading["files"]
    cmds = reading["commands"]
    assert isinstance(files, dict) and isinstance(cmds, dict)
    files["/etc/nccl.conf"] = {"exists": False}
    files["/etc/sparkctl/nccl.env"] = {
        "exists": True,
        "content": _text({**_ENV, "NCCL_IB_GID_INDEX": "1"}),
    }
    files["/opt/nccl-tests/build/all_gather_perf"] = {"exists": True, "executable": False}
    cmds["all_reduce_perf"] = {
        "rc": 127,
        "stdout": "",
        "stderr": "error while loading shared libraries: libmpi.so.40",
    }
    cmds["mpirun --version"] = {"rc": 0, "stdout": "HYDRA build details: MPICH 4.0\n", "stderr": ""}
    problems = envf.nccl_verify_problems(reading, _nccl_want())
    assert problems == [
        "/etc/sparkctl/nccl.env: NCCL_IB_GID_INDEX='1', expected '3'",
        "/etc/nccl.conf: missing",
        "NCCL_IB_GID_INDEX in /etc/sparkctl/nccl.env is 1, the node's RoCE v2 IPv4 GID index is 3",
        "/opt/nccl-tests/build/all_reduce_perf -h: rc 127: error while loading shared libraries: libmpi.so.40",
        "/opt/nccl-tests/build/all_gather_perf: missing or not executable",
        "mpirun --version: rc 0, HYDRA build details: MPICH 4.0",
    ]


def test_verify_problems_on_a_build_checks_which_libnccl_loads() -> None:
    want = _nccl_want(lib_path="/opt/nccl/build/lib/libnccl.so.2.28.9", nccl_home="/opt/nccl/build")
    reading = _nccl_reading()
    files, cmds = reading["files"], reading["commands"]
    assert isinstance(files, dict) and isinstance(cmds, dict)
    files["/opt/nccl/build/lib/libnccl.so.2.28.9"] = {"exists": True}
    cmds["ldd"] = {
        "rc": 0,
        "stdout": "\tlibnccl.so.2 => /usr/lib/aarch64-linux-gnu/libnccl.so.2 (0x0000ffff)\n",
        "stderr": "",
    }
    [problem] = envf.nccl_verify_problems(reading, want)
    assert "resolves libnccl to libnccl.so.2 => /usr/lib/aarch64-linux-gnu/libnccl.so.2" in problem
    cmds["ldd"] = {
        "rc": 0,
        "stdout": "\tlibnccl.so.2 => /opt/nccl/build/lib/libnccl.so.2 (0x0000ffff)\n",
        "stderr": "",
    }
    assert envf.nccl_verify_problems(reading, want) == []


def test_verify_problems_reports_a_garbled_file_instead_of_raising() -> None:
    reading = _nccl_reading()
    files = reading["files"]
    assert isinstance(files, dict)
    files["/etc/nccl.conf"] = {"exists": True, "content": "NCCL_DEBUG INFO\n"}
    [problem] = envf.nccl_verify_problems(reading, _nccl_want())
    assert problem.startswith("/etc/nccl.conf: line 1 is not KEY=VALUE")


def test_subnet_aware_routing_is_said_to_need_nccl_2_30_7() -> None:
    """NCCL_IB_SUBNET_AWARE_ROUTING is read only from NCCL v2.30.7-1 on (its NCCL_PARAM
    first appears in src/transport/net_ib/connect.cc there): with an older pin the role
    must not present it as doing anything, and says which release reads it."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    pinned = tuple(int(x) for x in re.findall(r"\d+", defaults["nccl_version"])[:3])
    assert pinned < (2, 30, 7)  # the pin does not read it: the texts must say so
    spec = (ROLE / "meta" / "argument_specs.yml").read_text()
    assert "NCCL_IB_SUBNET_AWARE_ROUTING (read only by NCCL 2.30.7 and later)" in spec
    assert "subnet-aware routing," not in spec
    vars_text = (ROLE / "vars" / "main.yml").read_text()
    note = vars_text[: vars_text.index('  NCCL_IB_SUBNET_AWARE_ROUTING: "1"')]
    assert "v2.30.7-1" in note.rsplit("NCCL_IB_GID_INDEX", 1)[1]
