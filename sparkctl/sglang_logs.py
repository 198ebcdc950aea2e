"""Moved: SGLang's start-up catalogue is sparkctl/serve/startup/ (catalogue.yml, reader.py),
NCCL's own lines are read by sparkctl/nccl_parse.py (nccl_parse.yml). Nothing imports this.

Kept, as this re-export, only because docs/reference.md and tests/fixtures/sglang/SOURCES.md
still name sparkctl/sglang_logs.py, which tests/unit/test_docs.py holds to exist, and the
move did not touch them. Delete it once they name the new places.
"""

from sparkctl.nccl_parse import nccl_transport, nccl_version, transport_signature  # noqa: F401
from sparkctl.serve.startup.reader import *  # noqa: F403
