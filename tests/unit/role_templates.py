"""A role's Jinja templates rendered as Ansible's template module renders them (its
trim_blocks and trailing newline, undefined values refused), with the role's filters."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jinja2


def template_env(
    role: Path, filters: Iterable[dict[str, Callable[..., Any]]]
) -> jinja2.Environment:
    """A Jinja environment over ``role``/templates with each filter map added in turn,
    under the FQCN the roles call them by (``sparkctl.spark.sparkctl_word``)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(role / "templates"),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(default=False),
    )
    for f in filters:
        env.filters.update({f"sparkctl.spark.{name}": fn for name, fn in f.items()})
    return env
