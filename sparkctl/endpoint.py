"""An OpenAI-compatible endpoint as the commands that talk to it hold it: serve upgrade's
golden prompts and bounded load, and the bench's load driver."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Endpoint:
    """The client, the base URL, the key's header, the model."""

    http: httpx.Client
    url: str
    headers: Mapping[str, str]
    model: str
