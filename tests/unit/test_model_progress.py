"""sparkctl.model_progress: one reading of the model_cache role's progress file, per node."""

from __future__ import annotations

import json

from sparkctl.model_progress import transfer_progress


def _reading(board: object) -> dict[str, object]:
    """What the role's progress task registers: the relay's ``watch`` output."""
    return {"stdout": json.dumps({"board": board, "job": {}}), "rc": 0}


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
    assert transfer_progress({"stdout": "not json"}) == {}
    assert transfer_progress({"stdout": json.dumps({"board": {}, "job": {}})}) == {}
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


def test_the_hop_where_a_stalled_transfer_stopped_is_marked() -> None:
    board = {
        "total_bytes": 4096,
        "finished": True,
        "error": "the transfer stood still for 60 s",
        "stalled": [{"host": "spark3", "address": "192.168.101.13", "stream": 1}],
        "hosts": {
            "spark2": {"bytes": 2048, "rate_bps": 0},
            "spark3": {"bytes": 1024, "rate_bps": 0},
        },
    }
    assert transfer_progress(_reading(board)) == {
        "spark2": "2.0 KiB of 4.0 KiB, 0 B/s",
        "spark3": "1.0 KiB of 4.0 KiB, 0 B/s, stalled here",
    }
