"""The `hypermnesia` subcommands by area; each module adds its own through `register(sub, bench)`."""
