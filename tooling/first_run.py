"""A first run that connects: with no token configured anywhere, `up` makes one for the local user.

The token is stored in the database like any `hypermnesia token create` token (its sha256 only) and
its text in HM_DATA_DIR/local-token (mode 0600), where the hooks, `hypermnesia mcp` and a person find it. It
acts as the OS user, granted `user:<name>`, `shared` and every project (`project:*`). `up` prints it
once, with the `claude mcp add` line and a `.mcp.json` snippet; later starts say where it is.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path

from hypermnesia.addresses import gateway_url
from hypermnesia.migrator import migrate
from hypermnesia.pool import connect_pool
from hypermnesia.settings import GatewaySettings
from services.curation import tokens, tokens_repo
from tooling.local_token import token_path


def local_user() -> str:
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        name = "local"
    return name or "local"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.replace(tmp, path)


def connect_lines(gateway: GatewaySettings, token: str) -> list[str]:
    """How to connect Claude Code with this token: one project folder in one step (`connect`), or
    by hand. A folder's .mcp.json may be committed, so its entry names the token as ${HM_TOKEN}."""
    url = f"{gateway_url(gateway.host, gateway.gateway_port)}/mcp"
    snippet = {
        "mcpServers": {
            "hypermnesia": {"type": "http", "url": url, "headers": {"Authorization": "Bearer ${HM_TOKEN}"}}
        }
    }
    return [
        "Connect Claude Code:",
        "  hypermnesia connect /path/to/project    (hooks + MCP entry, with the folder's project)",
        "or for every folder:",
        f'  claude mcp add --transport http hypermnesia {url} --header "Authorization: Bearer {token}"',
        "or in a project's .mcp.json (Claude Code expands ${HM_TOKEN} from its environment):",
        "  " + json.dumps(snippet),
    ]


async def ensure_local_token(database_url: str, gateway: GatewaySettings) -> list[str]:
    """Lines for `up` to print: a new token and how to connect, on the first run with no token
    configured anywhere; where the local token is kept, on later runs; nothing when tokens come
    from elsewhere or auth is off."""
    if gateway.auth_tokens or not gateway.require_auth:
        return []
    path = token_path(gateway.data_dir)
    pool = await connect_pool(database_url, max_size=1)
    try:
        await migrate(pool)
        if await tokens_repo.count_active(pool) > 0:
            if path.exists():
                return [f"token      kept in {path} (`hypermnesia token list` shows every token)"]
            return [
                "token      tokens are kept in the store (`hypermnesia token list`); "
                "`hypermnesia token create` makes another"
            ]
        user = local_user()
        token, _row = await tokens.create(
            pool,
            user,
            [f"user:{user}", "shared", "project:*"],
            "made by the first `hypermnesia up` for the local user",
        )
    finally:
        await pool.close()
    _write_private(path, token)
    return [
        f"token      a token for {user} was made and saved in {path} (mode 0600); it is printed once:",
        f"           {token}",
        *connect_lines(gateway, token),
    ]
