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


def test_a_lying_board_shows_nothing_but_figures_of_named_nodes() -> None:
    """The file is written on the head from what the nodes said: an escape sequence
    for a name, or a figure that is not a count, is left out, never printed or raised."""
    board = {
        "total_bytes": 1024,
        "hosts": {
            "spark2": {"bytes": 512, "rate_bps": 512, "files": 1},
            "\x1b]0;owned\x07spark3": {"bytes": 1, "rate_bps": 1},
            "spark4": {"bytes": "\x1b[2J", "rate_bps": 1},
            "spark5": {"bytes": -1, "rate_bps": 1},
            "spark6": {"bytes": True, "rate_bps": 1},
            "spark7": ["not", "a", "reading"],
        },
    }
    assert transfer_progress(_reading(board)) == {
        "spark2": "512 B of 1.0 KiB, 512 B/s, 1 file(s) written"
    }
    assert transfer_progress(_reading({**board, "total_bytes": "1e99"})) == {}
