"""The model transfer's deadline (roles/model_cache/vars/main.yml, _model_cache_deadline).

margin + bytes x 8 / (slowest link Mb/s x 10^6 x share), unless
model_cache_transfer_timeout names a number: rendered here from the role's own
text with Jinja, as Ansible renders it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROLE = (
    Path(__file__).resolve().parents[2]
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "model_cache"
)
VARS: dict[str, Any] = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _deadline(bytes_: int, mbps: int, timeout: object = "auto") -> int:
    env = jinja2.Environment(autoescape=False)  # noqa: S701 - not HTML
    text = env.from_string(VARS["_model_cache_deadline"]).render(
        model_cache_transfer_timeout=timeout,
        _model_cache_deadline_margin_s=VARS["_model_cache_deadline_margin_s"],
        _model_cache_rate_share=VARS["_model_cache_rate_share"],
        __model_cache_bytes=bytes_,
        __model_cache_link_mbps=mbps,
    )
    return int(text)


def test_the_default_is_derived_not_a_fixed_day() -> None:
    assert DEFAULTS["model_cache_transfer_timeout"] == "auto"


@pytest.mark.parametrize(
    ("size", "mbps"),
    [(240 * 10**9, 200000), (3 * 96 << 20, 10000), (1, 200000), (10**12, 1000)],
)
def test_the_deadline_follows_size_and_the_slowest_link(size: int, mbps: int) -> None:
    margin, share = VARS["_model_cache_deadline_margin_s"], VARS["_model_cache_rate_share"]
    assert _deadline(size, mbps) == margin + math.ceil(size * 8 / (mbps * 10**6 * share))


def test_a_240_gb_model_on_spark_links_is_given_minutes_not_a_day() -> None:
    # 240 GB over 200 Gb/s links at 5% of line rate: 192 s, plus the margin.
    assert _deadline(240 * 10**9, 200000) == VARS["_model_cache_deadline_margin_s"] + 192
    assert _deadline(240 * 10**9, 200000) < 86400 / 20


def test_more_bytes_or_a_slower_link_give_more_time() -> None:
    assert _deadline(2 * 10**11, 200000) > _deadline(10**11, 200000)
    assert _deadline(10**11, 10000) > _deadline(10**11, 200000)


@pytest.mark.parametrize("given", [3600, "3600"])
def test_a_number_in_the_inventory_overrides_it(given: object) -> None:
    assert _deadline(240 * 10**9, 200000, given) == 3600
