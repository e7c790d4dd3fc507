"""The operator's and developer's tools around the services: the `hypermnesia` command (`cli.py`,
`commands/`), the local supervisor (`up.py`), the in-process test stack (`local_stack.py`), the
benchmarks (`bench/`) and the retrieval evaluation (`evaluation/`).

Nothing in hypermnesia/, services/ or gateway/ imports this package; only the entry point
(`python -m hypermnesia`) does (tests/test_layering.py checks it)."""
