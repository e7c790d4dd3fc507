"""hypermnesia: a self-hosted memory service for AI agents.

This package is the one home for what the services share: settings, the store (pool, embedded
Postgres, migrations, embedding pin), the auth/scope model, input validation, errors, gRPC
plumbing, the generated contracts (`hypermnesia.v1`) and the command line.
"""

__version__ = "0.1.0"
