"""sparkctl bench's load driver against the lab's SGLang stand-in: two real ranks on
loopback (tests/unit/test_sglang_standin.py's group), its OpenAI /v1/completions
streamed as SGLang streams it (one chunk a token, then the usage chunk, then [DONE])."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkctl.bench.load import Workload, run_level, send
from sparkctl.bench.stats import summarize
from sparkctl.endpoint import Endpoint
from sparkctl.serve import probe
from tests.unit.test_sglang_standin import KEY, _up, cluster, write_model

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    tmp = tmp_path_factory.mktemp("bench-load")
    with cluster(tmp, write_model(tmp / "model"), 2) as c, probe.client(None, 60) as http:
        _up(c)
        yield Endpoint(
            http, f"http://127.0.0.1:{c.port}", {"Authorization": f"Bearer {KEY}"}, "toy"
        )


def test_the_workload_is_the_same_on_every_run() -> None:
    w = Workload(input_words=12, output_len=8, seed=7)
    assert w.prompt(3) == Workload(12, 8, 7).prompt(3)
    assert len(w.prompt(3).split()) == 12
    assert w.prompt(3) != w.prompt(4) and w.prompt(3) != Workload(12, 8, 8).prompt(3)


def test_a_level_times_every_request_by_its_stream(target: Endpoint) -> None:
    records, wall = run_level(target, Workload(8, 6), 2, requests=4)
    assert len(records) == 4 and all(r.success for r in records), records
    for r in records:
        # ignore_eos: 6 tokens, one text chunk each; usage counts them and the 8 words
        assert (r.output_len, r.input_len, len(r.itl)) == (6, 8, 5)
        assert 0 < r.ttft <= r.latency
    f = summarize(records, wall)
    assert f.output_tokens == 24 and f.errors == 0
    assert f.output_tokens_per_s > 0 and f.tpot_ms.p50 > 0


def test_a_refused_request_is_an_error_with_the_servers_answer(target: Endpoint) -> None:
    wrong_key = Endpoint(target.http, target.url, {"Authorization": "Bearer nope"}, target.model)
    r = send(wrong_key, "hello", 4)
    assert not r.success and r.error.startswith("HTTP 401")
    assert "nope" not in r.error


def test_a_level_can_run_for_a_duration(target: Endpoint) -> None:
    records, wall = run_level(target, Workload(4, 4), 1, duration_s=1.0)
    assert records and all(r.success for r in records), [r.error for r in records if r.error]
    assert wall >= 1.0
    with pytest.raises(ValueError, match="number of requests or a duration"):
        run_level(target, Workload(4, 4), 1)
