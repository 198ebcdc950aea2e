"""``sparkctl validate``: node assertions, the NCCL bandwidth gate, reports and baselines."""
