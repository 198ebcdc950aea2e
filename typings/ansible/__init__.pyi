# ansible ships no type hints: everything of it is Any, as under
# ignore_missing_imports, except the one module sparkctl puts into it (below).
from typing import Any

def __getattr__(name: str) -> Any: ...
