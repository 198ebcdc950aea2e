"""sparkctl.tool_output's memory cgroup reading, on real and documented /proc files
(tests/fixtures/cgroup/SOURCES.md): where a process's memory cgroup is, and what its
limit leaves, for validate's memory check and the size of nccl-tests' sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkctl.collection import tool_output

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
MiB, GiB = 1 << 20, 1 << 30


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_lab_node_s_memory_cgroup_is_its_mount_point() -> None:
    # /proc/self/cgroup shows the host's path; the read-only mount's root is that path.
    place = tool_output.memory_cgroup_dirs(
        fixture("podman-runc-v1-container.cgroup"), fixture("podman-runc-v1-container.mountinfo")
    )
    assert place == {"version": 1, "dirs": ["/sys/fs/cgroup/memory"]}
    assert tool_output.memory_cgroup_files(place) == [
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        "/sys/fs/cgroup/memory/memory.stat",
    ]
    # No limit (the page counter's maximum): no headroom bound; the usage as read.
    mem = tool_output.memory_cgroup(place, fixture("podman-runc-v1-container.grep"))
    assert mem == {"usage": 21262336, "headroom": None, "limit": None, "bound": None}


def test_a_hybrid_host_reads_the_v1_memory_hierarchy_and_every_ancestor() -> None:
    # The v2 hierarchy (/sys/fs/cgroup/unified) carries no controller on a hybrid host.
    place = tool_output.memory_cgroup_dirs(
        fixture("debian12-hybrid-host.cgroup"), fixture("debian12-hybrid-host.mountinfo")
    )
    assert place is not None and place["version"] == 1
    own = next(
        line.split(":", 2)[2]
        for line in fixture("debian12-hybrid-host.cgroup").splitlines()
        if line.split(":")[1] == "memory"
    )
    assert place["dirs"][0] == "/sys/fs/cgroup/memory" + own
    assert place["dirs"][-1] == "/sys/fs/cgroup/memory"
    assert len(place["dirs"]) == own.count("/") + 1


def v2(name: str) -> dict[str, Any]:
    place = tool_output.memory_cgroup_dirs(fixture(name), fixture("ubuntu-24.04-v2.mountinfo"))
    assert place is not None
    return place


def test_dgx_os_v2_session_and_container_paths() -> None:
    assert v2("ubuntu-24.04-v2-session.cgroup") == {
        "version": 2,
        "dirs": [
            "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope",
            "/sys/fs/cgroup/user.slice/user-1000.slice",
            "/sys/fs/cgroup/user.slice",
            "/sys/fs/cgroup",
        ],
    }
    docker = v2("ubuntu-24.04-v2-docker.cgroup")
    assert str(docker["dirs"][0]).startswith("/sys/fs/cgroup/system.slice/docker-")
    assert tool_output.memory_cgroup_files(docker)[:3] == [
        f"{docker['dirs'][0]}/memory.max",
        f"{docker['dirs'][0]}/memory.current",
        f"{docker['dirs'][0]}/memory.stat",
    ]


def grep_lines(values: dict[str, object]) -> str:
    """What `grep -H -s .` prints for these files (a missing file prints nothing)."""
    out = []
    for path, value in values.items():
        lines = value if isinstance(value, list) else [value]
        out += [f"{path}:{line}" for line in lines]
    return "\n".join(out) + "\n"


def test_v2_headroom_is_the_tightest_limit_less_its_working_set() -> None:
    place = v2("ubuntu-24.04-v2-session.cgroup")
    session, user, slice_, _root = place["dirs"]
    text = grep_lines(
        {
            f"{session}/memory.max": "max",
            f"{session}/memory.current": str(300 * MiB),
            f"{session}/memory.stat": ["anon 250000000", "inactive_file 1048576"],
            f"{user}/memory.max": "max",
            f"{user}/memory.current": str(2 * GiB),
            # user.slice with MemoryMax=8G: 6 GiB used, 1 GiB of it inactive page cache
            f"{slice_}/memory.max": str(8 * GiB),
            f"{slice_}/memory.current": str(6 * GiB),
            f"{slice_}/memory.stat": ["anon 4000000000", f"inactive_file {GiB}"],
            # the root cgroup has no memory.max or memory.current: grep prints nothing
        }
    )
    mem = tool_output.memory_cgroup(place, text)
    assert mem == {"usage": 300 * MiB, "headroom": 3 * GiB, "limit": 8 * GiB, "bound": slice_}


def test_v1_container_limit_counts_inactive_file_pages_as_free() -> None:
    place = {"version": 1, "dirs": ["/sys/fs/cgroup/memory"]}
    text = grep_lines(
        {
            "/sys/fs/cgroup/memory/memory.limit_in_bytes": str(3 * GiB),
            "/sys/fs/cgroup/memory/memory.usage_in_bytes": str(3 * GiB - 20 * MiB),
            # v1's hierarchical total_ figure, not the cgroup's own inactive_file
            "/sys/fs/cgroup/memory/memory.stat": [
                f"inactive_file {MiB}",
                f"total_inactive_file {30 * MiB}",
            ],
        }
    )
    mem = tool_output.memory_cgroup(place, text)
    assert mem["headroom"] == 50 * MiB and mem["limit"] == 3 * GiB
    assert mem["usage"] == 3 * GiB - 20 * MiB


@pytest.mark.parametrize(
    ("cgroup", "mountinfo"),
    [
        ("0::/user.slice\n", "22 28 0:21 / /sys rw - sysfs sysfs rw\n"),  # nothing mounted
        ("", fixture("ubuntu-24.04-v2.mountinfo")),  # no cgroup line
    ],
)
def test_no_memory_controller_is_none(cgroup: str, mountinfo: str) -> None:
    assert tool_output.memory_cgroup_dirs(cgroup, mountinfo) is None


def test_an_escaped_mount_point_is_decoded() -> None:
    mountinfo = "35 22 0:30 / /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw\n"
    place = tool_output.memory_cgroup_dirs("0::/a\n", mountinfo)
    assert place == {"version": 2, "dirs": ["/sys/fs/cgroup x/a", "/sys/fs/cgroup x"]}
