"""Which NCCL runs where: the host build validate measures, the image's the server loads.

``validate`` runs nccl-tests against the NCCL the nccl role built on the hosts
(``nccl_version``, v2.28.9-1). SGLang runs in its image with the NCCL bundled
there (another build, possibly another release), which nothing else
measures. ``serve up`` reads the version each rank's process loaded from its
journal (NCCL's ``NCCL version 2.28.3+cuda13.0`` INFO banner,
:func:`sparkctl.nccl_parse.nccl_version`) and keeps it with the cluster's serve
state (:func:`save`); both reports show the two side by side and warn when they
differ or when a version is known to be bad on Sparks (:data:`KNOWN_BAD`, data
with its public source).

Pure functions over values, except :func:`save` and :func:`load`, which read and
write one JSON file in the cluster's results directory.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sparkctl.paths import state_dir, write_atomic


@dataclass(frozen=True)
class KnownBad:
    """An NCCL release that misbehaves on Spark clusters: what, the workaround, the source."""

    version: str  # x.y.z
    problem: str
    workaround: str
    source: str


#: NCCL releases known to fail on DGX Spark clusters, by x.y.z.
KNOWN_BAD: Mapping[str, KnownBad] = MappingProxyType(
    {
        "2.30.4": KnownBad(
            "2.30.4",
            "hangs in its NVLS code path on DGX Spark clusters (GB10, no NVLink), silently, "
            "e.g. while loading MoE expert weights at TP=8; 2.30.3 works",
            'an image with another NCCL (2.30.3 works); NCCL_NVLS_ENABLE: "0" in '
            "nccl_env_extra was reported to help, then by its reporter not to be a sure fix",
            "https://github.com/NVIDIA/nccl/issues/2167",
        ),
    }
)

_RELEASE = re.compile(r"v?(\d+\.\d+\.\d+)")


def release(text: str | None) -> str | None:
    """x.y.z of a version as NCCL, nccl-tests or the nccl role write it ("2.28.3+cuda13.0",
    "v2.28.9-1", "2.28.9"); None when there is none."""
    m = _RELEASE.match((text or "").strip())
    return m.group(1) if m else None


@dataclass(frozen=True)
class Note:
    """One line for a report; ``warning`` ones are shown as such."""

    text: str
    warning: bool = False


def _known_bad(version: str, where: str) -> Note | None:
    bad = KNOWN_BAD.get(release(version) or "")
    if bad is None:
        return None
    return Note(
        f"{where} NCCL {bad.version} {bad.problem} ({bad.source}); workaround: {bad.workaround}",
        warning=True,
    )


def compare(image: Mapping[str, str], host: str | None, *, image_seen: str = "") -> list[Note]:
    """What to say about the image's NCCL (node -> the version its rank loaded) beside the
    host build validate measures (``host``: the nccl role's pin or what nccl-tests printed;
    None where there is none, as in the lab)."""
    notes: list[Note] = []
    versions = sorted(set(image.values()))
    seen = f" ({image_seen})" if image_seen else ""
    host_x = release(host)
    host_text = (
        f"; validate measures the host build {host_x}" if host_x else "; no host build recorded"
    )
    if not versions:
        return [Note(f"NCCL in the image: not seen in any rank's log{seen}{host_text}")]
    notes.append(Note(f"NCCL in the image: {', '.join(versions)}{seen}{host_text}"))
    if len(versions) > 1:
        by = ", ".join(f"{node} {v}" for node, v in sorted(image.items()))
        notes.append(Note(f"the ranks loaded different NCCL releases: {by}", warning=True))
    image_x = sorted({x for x in (release(v) for v in versions) if x is not None})
    if host_x and any(v != host_x for v in image_x):
        notes.append(
            Note(
                f"the image's NCCL {', '.join(image_x)} is not the host build {host_x} that "
                "validate measures: validate's bandwidth speaks for the host's library, the "
                "server runs the image's",
                warning=True,
            )
        )
    for v in image_x:
        note = _known_bad(v, "the image's")
        if note is not None:
            notes.append(note)
    if host_x and host_x not in image_x:
        note = _known_bad(host_x, "the host's")
        if note is not None:
            notes.append(note)
    return notes


def measured(reports: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """The NCCL versions nccl-tests logs named (NcclReport.to_dict()'s nccl_library and
    nccl_banner), in order, once each."""
    seen: list[str] = []
    for rep in reports:
        if not rep:
            continue
        library = rep.get("nccl_library")
        for version in [library] if library else []:
            seen.append(str(version))
        seen += [str(v) for v in rep.get("nccl_banner") or []]
    return list(dict.fromkeys(release(v) or v for v in seen))


# ------------------------------------------------------------------ the serve state
def state_file(cluster: str) -> Path:
    """Where serve up keeps what the image's NCCL was: beside validate's ``last-good``."""
    return state_dir() / "results" / cluster / "serve-nccl.json"


@dataclass(frozen=True)
class ImageNccl:
    """The NCCL each rank loaded at the last serve up that saw it."""

    versions: dict[str, str]  # node -> "2.28.3+cuda13.0"
    recorded: str  # ISO 8601, UTC
    run_dir: str  # that serve up's results directory

    def to_dict(self) -> dict[str, Any]:
        return {"versions": dict(self.versions), "recorded": self.recorded, "run_dir": self.run_dir}


def save(cluster: str, versions: Mapping[str, str], run_dir: Path) -> ImageNccl:
    """Keep ``versions`` as the cluster's image NCCL (written whole, then renamed)."""
    record = ImageNccl(
        {str(k): str(v) for k, v in versions.items()},
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        str(run_dir),
    )
    write_atomic(state_file(cluster), json.dumps(record.to_dict(), indent=1, sort_keys=True) + "\n")
    return record


def load(cluster: str) -> ImageNccl | None:
    """The last record :func:`save` kept; None when there is none or it is not one."""
    try:
        data = json.loads(state_file(cluster).read_text())
        versions = data["versions"]
        if not isinstance(versions, dict):
            return None
        return ImageNccl(
            {str(k): str(v) for k, v in versions.items()},
            str(data["recorded"]),
            str(data["run_dir"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def validate_notes(cluster: str, host_versions: list[str]) -> list[Note]:
    """validate's lines: the host NCCL nccl-tests ran, beside the image's from the last
    serve up (when there was one), with the same warnings."""
    host = host_versions[0] if host_versions else None
    notes = [_known_bad(v, "the host's") for v in host_versions]
    image = load(cluster)
    if image is None:
        text = ", ".join(host_versions) or "not named in the logs"
        return [
            Note(
                f"NCCL of nccl-tests (the host build): {text}; the image's: not yet seen "
                "(serve up records it)"
            ),
            *[n for n in notes if n is not None],
        ]
    out = compare(image.versions, host, image_seen=f"serve up {image.recorded}")
    return out + [n for n in notes if n is not None and n not in out]
