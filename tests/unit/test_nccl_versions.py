"""The image's NCCL beside the host build: sparkctl/nccl_versions.py and its serve up hook.

The versions come from real logs: NCCL's INFO banner in an SGLang rank's journal
(tests/fixtures/sglang/hang_at_dist_init_sglang30609.log, "NCCL version
2.28.9+cuda13.0"), nccl-tests' version line in a GB10 log
(tests/fixtures/nccl/gb10-2.18.3-all-gather-mpirun-noise.log, nccl-library=22809).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkctl import nccl_parse, nccl_versions, present
from sparkctl.serve import up
from sparkctl.serve.startup import reader as logs
from tests.unit.test_serve_up import FakeCluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SGLANG_LOG = FIXTURES / "sglang" / "hang_at_dist_init_sglang30609.log"
NCCL_TESTS_LOG = FIXTURES / "nccl" / "gb10-2.18.3-all-gather-mpirun-noise.log"
# The nccl role's record on a Spark (roles/nccl/vars/main.yml _nccl_version_record).
RECORD = (
    "NCCL_VERSION=v2.28.9-1\nNCCL_HOME=/opt/nccl/build\nNCCL_TESTS_VERSION=v2.18.3\n"
    "NCCL_TESTS_IMPL=build\n"
)


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _image_version() -> str | None:
    rank = logs.RankLog()
    for line in SGLANG_LOG.read_text().splitlines():
        rank.feed(line)
    return rank.nccl


def test_a_ranks_journal_says_which_nccl_its_process_loaded() -> None:
    assert _image_version() == "2.28.9+cuda13.0"
    torch_error = (FIXTURES / "sglang" / "nccl_no_route_hkproj1.log").read_text().splitlines()[0]
    assert nccl_parse.nccl_version(torch_error) == "2.18.6"
    assert nccl_parse.nccl_version("NCCL INFO Using network IB") is None
    # SGLang's own line on TP0 says it at any NCCL_DEBUG (pynccl.py), without the build.
    rank = logs.RankLog()
    for line in (FIXTURES / "sglang" / "clean_gloo_nccl_sglang10053.log").read_text().splitlines():
        rank.feed(line)
    assert rank.nccl == "2.27.3"


def test_release_reads_every_way_a_version_is_written() -> None:
    assert nccl_versions.release("2.28.3+cuda13.0") == "2.28.3"
    assert nccl_versions.release("v2.28.9-1") == "2.28.9"
    assert nccl_versions.release("none") is None
    assert nccl_versions.release(None) is None


def test_the_same_release_is_said_without_a_warning() -> None:
    notes = nccl_versions.compare({"spark1": "2.28.9+cuda13.0"}, "v2.28.9-1")
    assert notes == [
        nccl_versions.Note(
            "NCCL in the image: 2.28.9+cuda13.0; validate measures the host build 2.28.9"
        )
    ]


def test_an_image_nccl_other_than_the_host_build_is_a_warning() -> None:
    notes = nccl_versions.compare(
        {"spark1": "2.28.3+cuda13.0", "spark2": "2.28.3+cuda13.0"}, "v2.28.9-1"
    )
    assert [n.warning for n in notes] == [False, True]
    assert notes[1].text.startswith("the image's NCCL 2.28.3 is not the host build 2.28.9")


def test_ranks_with_different_nccl_are_named() -> None:
    notes = nccl_versions.compare({"spark1": "2.28.3+cuda13.0", "spark2": "2.28.9+cuda13.0"}, None)
    assert any(
        n.warning and "spark1 2.28.3+cuda13.0, spark2 2.28.9+cuda13.0" in n.text for n in notes
    )


def test_a_known_bad_release_is_flagged_with_its_source_and_workaround() -> None:
    bad = nccl_versions.KNOWN_BAD["2.30.4"]
    assert bad.source == "https://github.com/NVIDIA/nccl/issues/2167"
    assert "NCCL_NVLS_ENABLE" in bad.workaround
    notes = nccl_versions.compare({"spark1": "2.30.4+cuda13.0"}, "v2.30.4-1")
    flagged = [n for n in notes if n.warning]
    assert len(flagged) == 1 and "the image's NCCL 2.30.4 hangs" in flagged[0].text
    assert "issues/2167" in flagged[0].text
    host_bad = nccl_versions.compare({"spark1": "2.28.3+cuda13.0"}, "v2.30.4-1")
    assert any("the host's NCCL 2.30.4" in n.text for n in host_bad)


def test_validate_reads_the_host_nccl_from_its_nccl_tests_logs() -> None:
    report = nccl_parse.parse(NCCL_TESTS_LOG.read_text()).to_dict()
    assert nccl_versions.measured([report, None]) == ["2.28.9"]


def test_the_serve_state_round_trips_and_validate_sets_the_two_side_by_side(
    state: Path, tmp_path: Path
) -> None:
    before = nccl_versions.validate_notes("spark", ["2.28.9"])
    assert before[0].text.endswith("the image's: not yet seen (serve up records it)")
    saved = nccl_versions.save("spark", {"spark1": "2.28.3+cuda13.0"}, tmp_path / "run")
    path = state / "results" / "spark" / "serve-nccl.json"
    assert json.loads(path.read_text())["versions"] == {"spark1": "2.28.3+cuda13.0"}
    assert nccl_versions.load("spark") == saved
    notes = nccl_versions.validate_notes("spark", ["2.28.9"])
    assert notes[0].text.startswith(
        f"NCCL in the image: 2.28.3+cuda13.0 (serve up {saved.recorded})"
    )
    assert any(n.warning and "not the host build 2.28.9" in n.text for n in notes)
    path.write_text("{not json")
    assert nccl_versions.load("spark") is None


class _RecordCluster(FakeCluster):
    """serve up's cluster with the nccl role's record on the head."""

    record: str = RECORD
    run_dir: Path = Path("/nonexistent")
    inv: SimpleNamespace = SimpleNamespace(cluster="spark")

    def run(self, node: str, command: str, timeout: int = 60) -> tuple[int, str]:
        if command == "cat /etc/sparkctl/nccl-version":
            return 0, self.record
        return super().run(node, command, timeout)


def test_serve_up_records_the_images_nccl_and_sets_it_beside_the_host_build(
    tmp_path: Path,
) -> None:
    cluster = _RecordCluster()
    cluster.run_dir = tmp_path
    ranks = {n: up.Rank(n, cluster.rank(n)) for n in cluster.nodes}
    for line in SGLANG_LOG.read_text().splitlines():
        ranks["spark2"].feed(line)
    result = up.record_image_nccl(cluster, up.UpResult(True, 1.0, ranks, "ready"))  # type: ignore[arg-type]
    assert nccl_versions.load("spark") is not None
    assert nccl_versions.load("spark").versions == {"spark2": "2.28.9+cuda13.0"}  # type: ignore[union-attr]
    assert [n.text for n in result.nccl] == [
        "NCCL in the image: 2.28.9+cuda13.0; validate measures the host build 2.28.9"
    ]
    # Nothing seen (NCCL_DEBUG below INFO): nothing recorded, nothing said.
    empty = {n: up.Rank(n, cluster.rank(n)) for n in cluster.nodes}
    assert up.record_image_nccl(cluster, up.UpResult(True, 1.0, empty, "ready")).nccl == []  # type: ignore[arg-type]


def test_serve_ups_output_shows_the_pair_and_the_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    notes = nccl_versions.compare({"spark1": "2.28.3+cuda13.0"}, "v2.28.9-1")
    result = up.UpResult(True, 1.0, {}, "ready", model_name="m", nccl=notes)
    present.serve_up(result)
    out = capsys.readouterr().out
    assert "NCCL in the image: 2.28.3+cuda13.0; validate measures the host build 2.28.9" in out
    assert "warning: the image's NCCL 2.28.3 is not the host build 2.28.9" in " ".join(out.split())
