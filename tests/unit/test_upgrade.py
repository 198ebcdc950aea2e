"""serve upgrade's decisions on recorded outcomes (sparkctl.serve.upgrade.decide), its gate
(sparkctl.serve.golden) and the golden prompts' filter."""

from __future__ import annotations

import threading
import time

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.filter import sglang_golden as golden_filter
from sparkctl.errors import SparkctlError
from sparkctl.plan import GoldenPrompt
from sparkctl.report.model import Check
from sparkctl.serve import golden
from sparkctl.serve.upgrade import (
    GroupOutcome,
    UpgradeResult,
    Version,
    decide,
    parse_version,
    rollback_vars,
)

OLD = Version(
    "lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:" + "a" * 64,
    (("spark1", "/srv/m/groups"), ("spark2", "/var/lib/sparkctl/models/groups")),
)


def _passed(check: str = "health") -> Check:
    return Check(check, "spark1", None, "passed", "ok")


def test_a_group_whose_every_check_passed_keeps_the_new_version() -> None:
    o = GroupOutcome("a", "spark1", OLD, drained=True, checks=[_passed(), _passed("golden")])
    assert decide(o) == ("keep", "every check passed")


def test_a_group_that_did_not_serve_before_is_not_touched() -> None:
    o = GroupOutcome("a", "spark1", OLD, before_error="health on spark1: HTTP 503")
    decision, why = decide(o)
    assert decision == "not-started"
    assert "did not pass serve verify before its upgrade (health on spark1: HTTP 503)" in why


def test_a_group_that_did_not_drain_is_not_stopped_and_nothing_is_rolled_back() -> None:
    decision, why = decide(GroupOutcome("b", "spark3", OLD, drained=False))
    assert decision == "not-started"
    assert "not stopped" in why


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (GroupOutcome("a", "spark1", OLD, swap_error="spark2: no such image"), "the swap failed"),
        (
            GroupOutcome("a", "spark1", OLD, start_error="rank 0 exited: ModuleNotFoundError"),
            "did not start: rank 0 exited",
        ),
        (
            GroupOutcome(
                "a",
                "spark1",
                OLD,
                checks=[
                    _passed(),
                    Check("golden", "spark1", "golden 2", "failed", "answer sha256 differs"),
                    Check("bounded_load", "spark1", "concurrency 8", "failed", "7 of 8"),
                ],
            ),
            "golden (golden 2) failed and 1 more: answer sha256 differs",
        ),
        (GroupOutcome("a", "spark1", OLD), "was not checked"),
    ],
)
def test_any_failure_after_the_stop_rolls_the_group_back(outcome: GroupOutcome, said: str) -> None:
    decision, why = decide(outcome)
    assert decision == "rollback"
    assert said in why


def test_a_skipped_check_does_not_roll_back() -> None:
    o = GroupOutcome(
        "a",
        "spark1",
        OLD,
        checks=[_passed(), Check("figures", "spark1", "ttft_s", "skipped", "no figure")],
    )
    assert decide(o)[0] == "keep"


def test_the_failure_says_what_failed_that_the_old_version_serves_and_what_kept_the_new() -> None:
    kept = GroupOutcome("a", "spark1", OLD, decision="keep", reason="every check passed")
    back = GroupOutcome(
        "b",
        "spark3",
        OLD,
        decision="rollback",
        reason="golden (golden 1) failed: lacks 'ranks'",
        rolled_back=True,
        rollback_ok=True,
    )
    result = UpgradeResult("inv.ini", "sim", "x@sha256:" + "b" * 64, True, [kept, back], "/r")
    err = result.failure()
    assert err is not None and err.code == 1
    assert "group b was rolled back: golden (golden 1) failed" in err.message
    assert "previous version serves again (lmsysorg/sglang:v0.5.17" in err.message
    assert "group(s) a keep the new version" in err.message
    back.rollback_ok, back.rollback_error = False, "spark4 did not start"
    bad = result.failure()
    assert bad is not None and "its rollback failed too: spark4 did not start" in bad.message
    assert UpgradeResult("i", "sim", "t", True, [kept], "/r").failure() is None


def test_the_version_record_and_the_link_read_back() -> None:
    text = (
        "# What sparkctl-sglang.service runs on this node\n"
        "SGLANG_IMPL=container\nSGLANG_VERSION=0.5.17\n"
        "SGLANG_IMAGE=lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:" + "c" * 64 + "\n"
        "SGLANG_LAUNCHER=/usr/bin/docker,run\n\nLINK=/var/lib/sparkctl/models/groups\n"
    )
    image, root = parse_version("spark2", text)
    assert image.endswith("@sha256:" + "c" * 64)
    assert root == "/var/lib/sparkctl/models/groups"
    with pytest.raises(SparkctlError, match="spark2: no SGLANG_IMAGE"):
        parse_version("spark2", "LINK=/x\n")
    with pytest.raises(SparkctlError, match="does not read"):
        parse_version("spark2", "not a record\n")


# ------------------------------------------------------------------ the gate
P = (
    GoldenPrompt("What is 2+2?", ("4",), False, 8),
    GoldenPrompt("Say the model's name.", (), True, 16),
)


def test_golden_checks_words_and_the_previous_versions_hash() -> None:
    before = [golden.Answer(P[0].prompt, "2+2 is 4"), golden.Answer(P[1].prompt, "alpha beta")]
    same = [golden.Answer(P[0].prompt, "it is 4"), golden.Answer(P[1].prompt, "alpha beta")]
    assert [c.outcome for c in golden.judge("spark1", P, same, before)] == ["passed", "passed"]
    other = [golden.Answer(P[0].prompt, "five"), golden.Answer(P[1].prompt, "alpha gamma")]
    checks = golden.judge("spark1", P, other, before)
    assert [c.outcome for c in checks] == ["failed", "failed"]
    assert checks[0].message.startswith("lacks '4'")
    assert "differs from the previous version's" in checks[1].message
    # no previous answer to hold it to: failed, not passed by default
    lost = golden.judge("spark1", P, same, [before[0], golden.Answer(P[1].prompt, "", "HTTP 503")])
    assert lost[1].outcome == "failed" and "no answer of the previous" in lost[1].message
    errored = golden.judge("spark1", P[:1], [golden.Answer(P[0].prompt, "", "timeout")], None)
    assert errored[0].message == "no answer: timeout"


def test_figures_are_held_to_the_previous_versions_within_the_tolerance() -> None:
    before = {"ttft_s": 0.1, "decode_tokens_per_s": 100.0}
    fine = golden.compare_figures("h", before, {"ttft_s": 0.14, "decode_tokens_per_s": 70.0}, 0.5)
    assert [c.outcome for c in fine] == ["passed", "passed"]
    slow = golden.compare_figures("h", before, {"ttft_s": 0.16, "decode_tokens_per_s": 60.0}, 0.5)
    assert [c.outcome for c in slow] == ["failed", "failed"]
    assert slow[0].message.startswith("0.160 against 0.100 before (1.60x")
    assert golden.compare_figures("h", {}, {"ttft_s": 1.0}, 0.5)[0].outcome == "skipped"


def test_the_bounded_load_runs_each_concurrency_and_counts_every_failure() -> None:
    running, peak, calls = 0, 0, 0
    lock = threading.Lock()

    def send() -> None:
        nonlocal running, peak, calls
        with lock:
            running += 1
            calls += 1
            peak = max(peak, running)
            n = calls
        time.sleep(0.01)
        with lock:
            running -= 1
        if n % 5 == 0:
            raise ValueError("HTTP 503")

    loads = golden.bounded_load(send, [1, 4], 10)
    assert [(ld.concurrency, ld.sent, ld.failed) for ld in loads] == [(1, 10, 2), (4, 10, 2)]
    assert peak == 4
    checks = golden.load_checks("spark1", loads)
    assert checks[0].outcome == "failed" and "8 of 10 answered" in checks[0].message
    assert "first error: ValueError: HTTP 503" in checks[0].message


# ------------------------------------------------------------------ the filter
def test_the_filter_fills_in_defaults_and_refuses_what_checks_nothing() -> None:
    got = golden_filter.sglang_golden(
        [{"prompt": "Hi?", "same": True}, {"prompt": "2+2", "contains": ["4"]}]
    )
    assert got == [
        {"prompt": "Hi?", "contains": [], "same": True, "max_tokens": 32},
        {"prompt": "2+2", "contains": ["4"], "same": False, "max_tokens": 32},
    ]
    for bad, said in (
        ([{"prompt": "x"}], "checks nothing"),
        ([{"prompt": "x\ny", "same": True}], "newline"),
        ([{"prompt": "x", "same": "yes"}], "true or false"),
        ([{"prompt": "x", "same": True, "max_tokens": 0}], "1-1024"),
        ([{"prompt": "x", "same": True, "seed": 1}], "unknown field 'seed'"),
        ("x", "must be a list"),
    ):
        with pytest.raises(AnsibleFilterError, match=said):
            golden_filter.sglang_golden(bad)


def test_the_rollback_puts_back_the_image_and_mounts_the_models_it_read_in_place() -> None:
    got = rollback_vars(OLD, "/var/lib/sparkctl/models/current")
    assert got == {
        "model_cache_link_previous": True,
        "sglang_image": "lmsysorg/sglang:v0.5.17-cu130-runtime",
        "sglang_image_digest": "sha256:" + "a" * 64,
        # the head read its copy in place (model_cache_source head): mounted again
        "sglang_model_mounts": ["/var/lib/sparkctl/models", "/srv/m/groups"],
    }
    venv = Version("none", (("spark1", "/var/lib/sparkctl/models/m"),))
    assert rollback_vars(venv, "/var/lib/sparkctl/models/current") == {
        "model_cache_link_previous": True,
        "sglang_model_mounts": ["/var/lib/sparkctl/models"],
    }
    # read back from a node, bound for the unit's command line: refused when it does not fit
    odd = Version(OLD.image, (("spark1", "/srv/m/a b"),))
    with pytest.raises(SparkctlError, match="a previous model directory '/srv/m/a b'"):
        rollback_vars(odd, "/var/lib/sparkctl/models/current")
    with pytest.raises(SparkctlError, match="the previous image's digest"):
        rollback_vars(Version("x/y:1@sha256:zz", ()), "/m/current")
