"""sparkctl.model_progress: one reading of the model_cache role's progress file, per node."""

from __future__ import annotations

import json

from sparkctl.model_progress import transfer_progress


def _reading(board: object) -> dict[str, object]:
    return {"files": {"/run/sparkctl-model/progress.json": {"content": json.dumps(board)}}}


def test_one_line_per_node_with_bytes_total_and_rate() -> None:
    board = {
        "total_bytes": 1 << 30,
        "hosts": {
            "spark2": {"bytes": 1536, "rate_bps": 512, "files": 3},
            "spark3": {"bytes": 1 << 30, "rate_bps": 5 << 29, "done": True},
        },
    }
    assert transfer_progress(_reading(board)) == {
        "spark2": "1.5 KiB of 1.0 GiB, 512 B/s, 3 file(s) written",
        "spark3": "1.0 GiB of 1.0 GiB, 2.5 GiB/s, done",
    }


def test_nothing_to_show_without_a_readable_board() -> None:
    assert transfer_progress(None) == {}
    assert transfer_progress({"files": {"p": {"content": "not json"}}}) == {}
    assert transfer_progress(_reading({"hosts": []})) == {}
