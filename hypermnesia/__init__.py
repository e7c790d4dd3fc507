"""hypermnesia: a self-hosted memory service for AI agents.

This package is the one home for what the services share: settings, the store (embedded Postgres,
pool, migrator, embedding pin), the memory row, the auth/scope model, input validation, errors,
gRPC plumbing and the generated contracts (`hypermnesia.v1`). The command line, the local
supervisor and the benches live in `tooling/`.
"""

# The one statement of the version: the gateway's REST and MCP servers report it, and the package
# metadata is to read it from here (pyproject.toml: dynamic = ["version"]).
__version__ = "0.1.0"
