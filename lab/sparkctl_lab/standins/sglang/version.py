"""The SGLang release the stand-in answers for (a unit test keeps it equal to sglang_version)."""

__version__ = "0.5.17"
