"""sparkctl bench: what the serving cluster delivers under a fixed load, and why."""
