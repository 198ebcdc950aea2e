"""serve down's proof that the memory came back, and serve up's refusal of a leftover
(sparkctl/serve/memory.py, sparkctl/serve/up.py).

Nothing is scripted where the real thing runs here: the cluster's runner runs every
command on this machine with bash (one Spark, reached as root), so the readings are
this machine's own /proc/meminfo, ``ps -ww -eo pid,args`` and /proc/PID/fd, and a
leftover is a real process with SGLang's command line that serve down must name and
stop. Only the record serve up keeps (our own JSON) is written by the tests, to put
the "before" reading where a case needs it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import SparkctlError
from sparkctl.inventory import Inventory, Node
from sparkctl.paths import roles_dir
from sparkctl.serve import memory, up
from sparkctl.serve.cluster import Cluster
from tests.unit import plans
from tests.unit.pathload import load_file
from tests.unit.test_lab_docker import DOCKER_PY, IMAGE, NO_NAMESPACES, make_node

# Reads every process of this host (serve's leftover scan, on the host as spark1): a rank
# another test starts would be a leftover here, so this module never runs beside other
# tests (scripts/test.sh runs it after the parallel pass, with the lab tests).
pytestmark = pytest.mark.host_processes

GiB = 1 << 30


def local(host: str, command: str, timeout: int) -> tuple[int, str]:
    """The cluster's runner for a Spark that is this machine: stdout, then stderr."""
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=timeout, check=False
    )
    return done.returncode, done.stdout + done.stderr


def one_spark(tmp_path: Path, method: str = "venv") -> Cluster:
    nodes = (Node("spark1", 0, "10.77.0.11", {"a": plans.fabric_ip("spark1", "a")}),)
    inv = Inventory(
        path=tmp_path / "one.ini",
        cluster="sim",
        nodes=nodes,
        switch=None,
        ports=(),
        hostvars={"spark1": {"ansible_user": "root"}},
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return plans.cluster(inv, {"install_method": method}, local, run_dir)


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(memory, "SETTLE_S", 0.0)
    return tmp_path / "state"


def _leftover(argv0: str, *, ignore_term: bool = False) -> subprocess.Popen[bytes]:
    """A process whose command line (``ps`` args) starts with ``argv0``, as a leftover
    rank's would; ready once its SIGTERM disposition is set."""
    code = (
        "import signal,sys,time\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
        + "print('ready', flush=True)\ntime.sleep(600)\n"
    )
    # exec -a: the name ps shows first, as SGLang's setproctitle or `python3 -m` would.
    proc = subprocess.Popen(
        ["bash", "-c", 'exec -a "$0" "$1" -c "$2"', argv0, sys.executable, code],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def _reading(cluster: Cluster) -> memory.Memory:
    mem = memory.survey(cluster)["spark1"].memory
    assert mem is not None
    return mem


def _record_before(cluster: Cluster, available: int) -> None:
    mem = _reading(cluster)
    memory.record("sim", {"spark1": memory.Memory(available, mem.total, mem.source)}, [], Path())


# ---------------------------------------------------------------- what is the service's
def test_the_service_is_known_by_the_command_lines_the_role_gives_it() -> None:
    """The launcher's path and the module it runs are the role's own values."""
    role = yaml.safe_load((roles_dir() / "sglang" / "vars" / "main.yml").read_text())
    assert role["_sglang_launcher_path"] == memory.LAUNCHER
    launcher = load_file(
        "sglang_launcher_for_memory", roles_dir() / "sglang/files/sglang_launcher.py"
    )
    assert launcher.MODULE == memory.MODULE
    # ps -ww -eo pid,args of a container rank, its docker client, and SGLang's titles
    ours = [
        "python3 /usr/local/lib/sparkctl/sglang-launcher.py --secrets-file "
        "/etc/sparkctl/sglang-secrets.env -- --model-path /var/lib/sparkctl/models/current",
        "/usr/bin/docker run --rm --name sparkctl-sglang --network host lmsysorg/sglang:"
        "v0.5.17-cu130-runtime python3 /usr/local/lib/sparkctl/sglang-launcher.py -- --tp 4",
        "sglang::scheduler_TP0",
        "sglang::detokenizer",
        "/usr/bin/python3 -m sglang.launch_server --model-path /m",
        "python3 /usr/local/lib/sparkctl/sglang-launcher.py --module sglang.launch_server -- -x",
    ]
    others = [
        "journalctl -u sparkctl-sglang.service -o cat -f -n 0 --no-pager",
        "vim /usr/local/lib/sparkctl/sglang-launcher.py",
        "less /usr/local/lib/sparkctl/sglang-launcher.py",
        "python3 -c import sglang.launch_server",
        "grep sglang",
        "python3 -m sglang.bench_serving --backend sglang",
        # the gateway, run by the same launcher (roles/sglang, sparkctl-gateway.service)
        "/opt/sparkctl/smg/bin/python3 /usr/local/lib/sparkctl/sglang-launcher.py "
        "--secrets-file /etc/sparkctl/sglang-secrets.env --module smg.launch_router -- "
        "--host 0.0.0.0 --port 30080",
        "smg::router",
    ]
    assert [memory.is_service(c) for c in ours] == [True] * len(ours)
    assert [memory.is_service(c) for c in others] == [False] * len(others)


def test_ps_and_fd_readings_parse_as_procps_and_find_print_them() -> None:
    ps = local("spark1", "ps -ww -eo pid,args", 30)[1]
    seen = memory.ps_pid_args(ps)
    # every process, its whole command line (this one's as /proc has it, NULs as blanks)
    mine = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode()
    assert seen[1] and seen[os.getpid()] == mine, (seen[os.getpid()], mine)
    fds = "/proc/1234/fd/5\n/proc/1234/fd/7\n/proc/88/fd/3\nfind: '/proc/9/fd': gone\n"
    assert memory.fd_pids(fds) == {1234, 88}


# ---------------------------------------------------------------- serve down
def test_down_names_and_stops_a_leftover_and_says_the_memory_is_back(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    cluster = one_spark(tmp_path)
    _record_before(cluster, _reading(cluster).available)
    procs.append(_leftover("python3 -m sglang.launch_server --model-path /m --tp 4"))
    freed = memory.free(cluster)
    [left] = [x for x in freed.leftovers if x.pid == procs[0].pid]
    assert left.node == "spark1" and left.ended == "stopped (SIGTERM)"
    assert left.command.startswith("python3 -m sglang.launch_server --model-path /m")
    assert procs[0].wait(timeout=30) == -signal.SIGTERM
    [back] = freed.memory
    assert back.ok and back.before is not None and back.after is not None
    result = up.Stopped(
        "sparkctl-sglang.service",
        ["spark1"],
        {"spark1": "inactive"},
        freed.memory,
        freed.leftovers,
        freed.gpu,
    )
    assert result.failure() is None
    data = result.to_dict()
    assert data["ok"] and data["memory"][0]["back"] is True
    [shown] = [x for x in data["leftovers"] if x["pid"] == procs[0].pid]
    assert (shown["node"], shown["ended"]) == ("spark1", "stopped (SIGTERM)")


def test_a_leftover_that_ignores_sigterm_is_killed_after_the_bound(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "TERM_GRACE_S", 1)
    cluster = one_spark(tmp_path)
    procs.append(_leftover("sglang::scheduler_TP0", ignore_term=True))
    freed = memory.free(cluster)
    [left] = [x for x in freed.leftovers if x.pid == procs[0].pid]
    assert left.ended == "killed (SIGKILL after 1 s)" and left.gone
    assert left.command.startswith("sglang::scheduler_TP0")
    assert procs[0].wait(timeout=30) == -signal.SIGKILL
    # no record from serve up: the reading is said, nothing is judged against it
    [back] = freed.memory
    assert back.ok and back.before is None
    assert "no reading from serve up to compare with" in back.text()


def test_memory_not_back_within_the_tolerance_fails_naming_the_node_and_numbers(
    tmp_path: Path,
) -> None:
    cluster = one_spark(tmp_path)
    now = _reading(cluster)
    # serve up read far more available than there is now: something still holds it
    before = now.available + memory.tolerance(now.total) + 40 * GiB
    _record_before(cluster, before)
    freed = memory.free(cluster)
    [back] = freed.memory
    assert not back.ok
    result = up.Stopped(
        "sparkctl-sglang.service", ["spark1"], {"spark1": "inactive"}, freed.memory, [], []
    )
    err = result.failure()
    assert err is not None and err.code == 1
    assert err.message.startswith("serve down: spark1: memory NOT back: ")
    assert f"{before / GiB:.1f} GiB before serve up" in err.message
    assert f"tolerance {memory.tolerance(now.total) / GiB:.1f} GiB" in err.message
    assert result.to_dict()["ok"] is False
    # within the tolerance it is back
    _record_before(cluster, now.available + memory.tolerance(now.total) // 2)
    assert all(b.ok for b in memory.free(cluster).memory)


def test_the_tolerance_is_two_gib_or_five_percent() -> None:
    assert memory.tolerance(3 * GiB) == 2 * GiB  # a lab node's limit
    gb10 = 127535524 * 1024  # MemTotal of a GB10 (tests/unit/test_tool_output.py)
    assert memory.tolerance(gb10) == int(gb10 * 0.05)


def test_a_cgroup_that_leaves_less_than_mem_available_is_the_reading() -> None:
    meminfo = "MemTotal:       24683568 kB\nMemFree:  21620248 kB\nMemAvailable:   24059824 kB\n"
    assert memory.memory_of(meminfo, None) == memory.Memory(
        24059824 * 1024, 24683568 * 1024, "MemAvailable"
    )
    lab = {"headroom": 2 * GiB, "limit": 3 * GiB, "bound": "/sys/fs/cgroup/memory", "usage": 1}
    assert memory.memory_of(meminfo, lab) == memory.Memory(
        2 * GiB, 3 * GiB, "cgroup /sys/fs/cgroup/memory"
    )


# ---------------------------------------------------------------- serve up
def test_serve_up_refuses_a_node_a_leftover_holds_before_any_rank_starts(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    state: Path,
) -> None:
    cluster = one_spark(tmp_path)
    started: list[str] = []
    monkeypatch.setattr(up, "open_cluster", lambda inv, command, extravars=None: cluster)
    monkeypatch.setattr(up, "start_units", lambda c: started.append("start"))
    monkeypatch.setattr(up, "serving_now", lambda c: None)
    monkeypatch.setattr(up, "running_nodes", lambda c: [])
    procs.append(_leftover("python3 /usr/local/lib/sparkctl/sglang-launcher.py -- --tp 4"))
    with pytest.raises(SparkctlError) as err:
        up.up(cluster.inv, timeout=5)
    assert err.value.code == 1
    assert f"spark1: pid {procs[0].pid} python3 /usr/local/lib/sparkctl/sglang-launcher.py" in (
        err.value.message
    )
    assert "no rank was started" in err.value.message
    assert err.value.hint is not None and "sparkctl serve down" in err.value.hint
    assert started == [] and procs[0].poll() is None  # named, not stopped: down does that
    assert not memory.state_file("sim").exists()


def test_serve_up_keeps_each_idle_nodes_memory_and_a_running_nodes_earlier_one(
    tmp_path: Path, state: Path
) -> None:
    cluster = one_spark(tmp_path)
    old = memory.Memory(1000 * GiB, 1200 * GiB, "MemAvailable")
    memory.record("sim", {"spark1": old, "spark2": old}, [], Path("/x"))
    kept = memory.load("sim")["spark2"]
    memory.before_start(cluster, [])  # spark1 is idle: read now
    saved = json.loads(memory.state_file("sim").read_text())
    assert set(saved["nodes"]) == {"spark1"}  # spark2 was not named as running: not kept
    assert saved["nodes"]["spark1"]["available"] < old.available  # this machine's reading
    assert saved["run_dir"] == str(cluster.run_dir)
    # a node whose unit runs (serve up --restart) keeps its reading from before that start
    memory.record("sim", {"spark1": old, "spark2": old}, [], Path("/x"))
    kept = memory.load("sim")["spark2"]
    memory.record("sim", {"spark1": memory.Memory(1, 2, "MemAvailable")}, ["spark2"], Path("/z"))
    assert memory.load("sim")["spark2"] == kept
    assert memory.load("sim")["spark1"]["available"] == 1


# ---------------------------------------------------------------- the container
@pytest.mark.skipif(NO_NAMESPACES is not None, reason=NO_NAMESPACES or "")
def test_a_leftover_container_is_named_by_docker_ps_and_stopped_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container method's leftover: the lab's docker stand-in (which prints what
    docker prints) runs a container under the unit's name, as a unit stopped without
    its ExecStop= would leave it; serve up refuses, serve down stops and removes it."""
    monkeypatch.setattr(memory, "TERM_GRACE_S", 1)
    node = make_node(tmp_path / "node")
    assert node.docker("pull", IMAGE).returncode == 0
    engine = tmp_path / "docker"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node.env.items())
    engine.write_text(f'#!/bin/sh\nexec env {env} {sys.executable} {DOCKER_PY} "$@"\n')
    engine.chmod(0o755)
    cluster = one_spark(tmp_path, "container")
    cluster = plans.cluster(
        cluster.inv,
        {"install_method": "container", "engine": str(engine)},
        local,
        cluster.run_dir,
    )
    name = cluster.sglang().container_name
    started = node.docker(
        "run", "-d", "--name", name, IMAGE, "python3", "-c", "import time\ntime.sleep(600)"
    )
    assert started.returncode == 0, started.stderr
    try:
        with pytest.raises(SparkctlError, match=rf"spark1: container {name} \(running\)"):
            memory.before_start(cluster, [])
        freed = memory.free(cluster)
        [left] = [x for x in freed.leftovers if x.pid == 0]
        assert (left.command, left.ended) == (f"{name} (running)", "stopped and removed")
        assert node.docker("ps", "-aq").stdout.strip() == ""
        memory.before_start(cluster, [])  # nothing left: serve up may start
    finally:
        node.docker("rm", "--force", name)


# ---------------------------------------------------------------- the command
def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    from sparkctl import cli  # noqa: PLC0415

    code: object = 0
    old = sys.argv
    sys.argv = ["sparkctl", *argv]
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err


def test_serve_down_shows_the_leftover_and_the_memory_and_exits_1_when_not_back(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sparkctl serve down` on the repository's sim inventory, its nodes' commands run
    on this machine: the leftover is named with how it ended, each node's memory is said
    against serve up's reading, and a node not back is the error (exit 1), numbers and all."""
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    sim = Path(__file__).resolve().parents[2] / "inventory" / "sim.ini"
    cluster = one_spark(tmp_path)
    monkeypatch.setattr(up, "open_cluster", lambda inv, command, extravars=None: cluster)
    monkeypatch.setattr(up, "stop_units", lambda c: {})
    monkeypatch.setattr(
        Cluster, "unit_states", lambda self, nodes=None: {"spark1": {"ActiveState": "inactive"}}
    )
    procs.append(_leftover("python3 -m sglang.launch_server --model-path /m"))
    now = _reading(cluster)
    _record_before(cluster, now.available + memory.tolerance(now.total) + 40 * GiB)
    code, out, err = _cli(["serve", "down", str(sim)], capsys)
    assert code == 1, err
    assert f"left over: spark1: pid {procs[0].pid} python3 -m sglang.launch_server" in out
    assert "stopped (SIGTERM)" in out
    assert "spark1: memory NOT back: " in out
    assert "error: serve down: spark1: memory NOT back: " in err
    _record_before(cluster, _reading(cluster).available)
    code, out, err = _cli(["serve", "down", str(sim), "--json"], capsys)
    assert code in (0, None), err
    data = json.loads(out)
    assert data["ok"] is True and data["leftovers"] == []
    assert [(m["node"], m["back"]) for m in data["memory"]] == [("spark1", True)]
