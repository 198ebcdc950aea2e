"""``sparkctl serve``: start the SGLang tensor-parallel group, follow it, say what went wrong."""
