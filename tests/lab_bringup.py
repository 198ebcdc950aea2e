"""The lab's bring-up for a test session, as a process of its own.

tests/conftest.py runs this (``python -m tests.lab_bringup``) on a background thread
while the unit tests run, with the environment the session started with
(tests/background.py START_ENV): unit tests change ``os.environ`` (a state dir of their
own, a PATH of stubs) and a subprocess started from the session's process meanwhile
would inherit it - the lab's keys once went into a unit test's temporary state dir.
Prints one JSON object: the host's state from before ``lab up`` (null when a running
lab is reused) and how ``lab up`` ended.

``--image`` builds the lab's node image first, when it is missing: scripts/test.sh runs
``python -m tests.lab_bringup --image`` beside its static checks and its first pytest
pass, and hands the JSON to the second pass's lab fixture (SPARKCTL_LAB_BROUGHT_UP), so
the two minutes of debootstrap, podman and SSH waits are not spent at its start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from tests.labhost import HostSnapshot, remove_stale_fault_rules


def _sparkctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=1800,
        check=False,
    )


def image() -> str:
    """The lab's node image, built when missing (the lab's bring-up and the molecule
    scenarios both need it: tests/conftest.py lab_image)."""
    from sparkctl_lab.image import ensure_image  # noqa: PLC0415
    from sparkctl_lab.lab import lab_dir  # noqa: PLC0415
    from sparkctl_lab.podman import Podman  # noqa: PLC0415

    return ensure_image(Podman(), work_dir=lab_dir() / "build")


def _build_image() -> str | None:
    """None once the image is there, or why it could not be built."""
    from sparkctl.errors import SparkctlError  # noqa: PLC0415

    try:
        image()
    except (SparkctlError, OSError, subprocess.SubprocessError) as exc:
        return f"building the lab image failed: {exc}"
    return None


def main(argv: list[str]) -> int:
    if "--image" in argv:
        failed = _build_image()
        if failed is not None:
            print(json.dumps({"before": None, "returncode": 1, "stderr": failed[-4000:]}))
            return 0
    keep = os.environ.get("SPARKCTL_KEEP_LAB") == "1"
    before: HostSnapshot | None = None
    # A run killed mid-test may have left a fault test's firewall rule behind
    # (it would cut spark3 off for the whole session): remove it first.
    for rule in remove_stale_fault_rules():
        print(f"removed a fault rule left by an interrupted run: {rule}", file=sys.stderr)
    if not (keep and _sparkctl("lab", "status").returncode == 0):
        down = _sparkctl("lab", "down")
        if down.returncode != 0:
            print(
                json.dumps(
                    {
                        "before": None,
                        "returncode": down.returncode,
                        "stderr": "lab down: " + down.stderr[-4000:],
                    }
                )
            )
            return 0
        before = HostSnapshot.take()
    up = _sparkctl("lab", "up", "--json")
    snapshot = (
        None
        if before is None
        else {
            k: sorted(v) if isinstance(v, frozenset) else list(v)
            for k, v in dataclasses.asdict(before).items()
        }
    )
    print(
        json.dumps({"before": snapshot, "returncode": up.returncode, "stderr": up.stderr[-4000:]})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
