"""Run pip with a DGX Spark's environment markers: ``python pip_as_spark.py install ...``.

``pip install --platform ... --python-version ...`` picks wheels for the target,
but evaluates environment markers (``platform_machine != "aarch64"``,
``python_version``) against the interpreter running pip: pip says so itself
("the resolver uses the default environment to evaluate environment markers",
pip/_internal/models/installation_report.py, the ``environment`` key of
``--report``; pypa/pip#11664). On this x86_64 controller a dry run of sglang
would then pull the x86-only ``torchcodec`` and ``st_attn`` and leave out the
aarch64-only ``av`` and ``decord2`` of sglang 0.5.17's Requires-Dist.

This wrapper replaces the vendored ``packaging.markers.default_environment``
BEFORE pip is imported (the report module binds the name at import), so the
resolver and the report both use a Spark's values: Ubuntu 24.04 (DGX OS 7) on
the GB10's Arm cores, whose python3 is CPython 3.12.3 (Ubuntu noble's
python3.12 package). Everything else is pip, unchanged.
"""

from __future__ import annotations

import sys
from typing import Any

SPARK_MARKERS = {
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "python_full_version": "3.12.3",
    "python_version": "3.12",
    "sys_platform": "linux",
}


def main(argv: list[str]) -> int:
    from pip._vendor.packaging import markers  # noqa: PLC0415 -- patched before pip's imports

    host_environment = markers.default_environment

    def spark_environment() -> dict[str, Any]:
        environment: dict[str, Any] = dict(host_environment())
        environment.update(SPARK_MARKERS)
        return environment

    markers.default_environment = spark_environment  # type: ignore[assignment]
    from pip._internal.cli.main import main as pip_main  # noqa: PLC0415

    return int(pip_main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
