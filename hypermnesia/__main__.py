"""`python -m hypermnesia`: the `hypermnesia` command (tooling/cli.py). The one module of the shared
package allowed to import the tooling (tests/test_layering.py)."""

from tooling.cli import main

main()
