"""The reference in docs/ against the code it describes, and the README against its promises.

docs/CLI.md is compared with the `hypermnesia` parser, docs/REST.md with the gateway's OpenAPI
document and routes, docs/SETTINGS.md with the settings classes and the variables read outside them,
in both directions: whatever exists is documented, and whatever is documented exists. Every page
is also checked for what it merely mentions: a `hypermnesia ...` command line, an `HM_*` variable, a
`METHOD /path` route, a repository file or a Markdown link that does not exist fails here. The
README stays short enough to read in five minutes.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from gateway.app import MCP_PATH, create_app
from gateway.auth import Authenticator
from gateway.backends import Backends
from gateway.mcp_tools import build_mcp
from gateway.tool_profiles import DEFAULT, DEFAULT_TOOLS
from hypermnesia.settings import GatewaySettings
from tooling.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_DOC = DOCS / "CLI.md"
REST_DOC = DOCS / "REST.md"
SETTINGS_DOC = DOCS / "SETTINGS.md"
ARCHITECTURE_DOC = DOCS / "ARCHITECTURE.md"
TOOLS_DOC = DOCS / "TOOLS.md"
# Every page a user reads: what they mention must exist.
PAGES = [
    README,
    *sorted(DOCS.glob("*.md")),
    ROOT / "deploy" / "README.md",
    *sorted(ROOT.glob("services/*/README.md")),
]
PRODUCT_PACKAGES = ("gateway", "services", "hypermnesia", "tooling")
README_MAX_WORDS = 1500
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- Markdown -----------------------------------------------------------------------------------


def _strip_fences(text: str) -> str:
    """The text outside fenced code blocks (lines inside are blanked, so line counts stay)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def _fenced_lines(text: str) -> list[str]:
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            out.append(line)
    return out


def _inline_code(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", _strip_fences(text))


def _sections(text: str, level: str) -> dict[str, str]:
    """Heading text -> the body up to the next heading of this level or above."""
    out: dict[str, str] = {}
    heading: str | None = None
    body: list[str] = []
    depth = len(level)
    for line in _strip_fences(text).splitlines() + ["#" * depth + " end"]:
        match = re.match(r"(#+) (.*)", line)
        if match and len(match.group(1)) <= depth:
            if heading is not None:
                out[heading] = "\n".join(body)
            heading = match.group(2).strip() if len(match.group(1)) == depth else None
            body = []
        else:
            body.append(line)
    return out


def _table_rows(text: str) -> list[list[str]]:
    """The cells of every table row that is not a header separator."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and not re.fullmatch(r"\|[\s:|-]+\|", line):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _slug(m.group(1))
        for m in re.finditer(r"^#+ (.*)$", _strip_fences(path.read_text()), flags=re.MULTILINE)
    }


# --- the command line ---------------------------------------------------------------------------


@dataclass
class Command:
    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    children: dict[str, Command]

    @property
    def options(self) -> set[str]:
        return {
            s
            for a in self.parser._actions
            if not isinstance(a, argparse._HelpAction)
            for s in a.option_strings
            if s.startswith("--")
        }

    @property
    def positionals(self) -> set[str]:
        return {
            (a.metavar if isinstance(a.metavar, str) else a.dest).upper()
            for a in self.parser._actions
            if not a.option_strings
            and not isinstance(a, argparse._SubParsersAction)
            and a.help != argparse.SUPPRESS
        }


def _command_tree() -> Command:
    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Command:
        children: dict[str, Command] = {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    children[name] = walk(sub, (*path, name))
        return Command(path, parser, children)

    return walk(build_parser(), ())


def _leaves(node: Command) -> Iterator[Command]:
    if not node.children:
        yield node
    for child in node.children.values():
        yield from _leaves(child)


TREE = _command_tree()


def _check_command_line(line: str) -> str | None:
    """What is wrong with a `hypermnesia ...` line as written in a doc, or None. Words are commands
    until a leaf; `a|b` lists alternatives; after the leaf, every --option must be the leaf's."""
    try:
        words = shlex.split(line.replace("…", ""), comments=False)
    except ValueError:
        words = line.split()
    words = words[1:]  # "hypermnesia"
    node = [TREE]
    for i, word in enumerate(words):
        if word in ("|", "&&", ">", "2>", ";") or word.startswith(("$", "#")):
            break
        if any(n.children for n in node) and (word == "..." or re.fullmatch(r"[A-Z_]+", word)):
            break  # a placeholder for any command: `hypermnesia COMMAND --help`
        if any(n.children for n in node):
            if word.startswith("-") or not re.fullmatch(r"[a-z][a-z0-9|-]*", word):
                return f"{' '.join(words[: i + 1])}: a command is missing before {word!r}"
            names = word.split("|")
            missing = [n for n in names if not any(n in c.children for c in node)]
            if missing:
                return f"{' '.join(words[: i + 1])}: no command {missing}"
            node = [c.children[n] for c in node for n in names if n in c.children]
            continue
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and flag != "--help" and not all(flag in n.options for n in node):
            return f"{line}: {flag} is not an option of `hypermnesia {' '.join(node[0].path)}`"
    return None


def _command_lines(path: Path) -> list[str]:
    text = path.read_text()
    inline = [c for c in _inline_code(text) if c.startswith("hypermnesia ")]
    fenced = [ln.strip() for ln in _fenced_lines(text) if ln.strip().startswith("hypermnesia ")]
    return inline + fenced


def test_cli_doc_has_a_section_for_every_command_and_only_those() -> None:
    documented = {h for h in _sections(CLI_DOC.read_text(), "###") if h.startswith("hypermnesia")}
    leaves = {" ".join(("hypermnesia", *leaf.path)) for leaf in _leaves(TREE)}
    assert leaves - documented == set(), (
        f"commands without a section in docs/CLI.md: {sorted(leaves - documented)}"
    )
    assert documented - leaves == set(), (
        f"sections of docs/CLI.md for no command: {sorted(documented - leaves)}"
    )


@pytest.mark.parametrize("leaf", list(_leaves(TREE)), ids=lambda c: " ".join(c.path))
def test_cli_doc_lists_each_option_of_the_command(leaf: Command) -> None:
    section = _sections(CLI_DOC.read_text(), "###")[" ".join(("hypermnesia", *leaf.path))]
    code = set(_inline_code(section)) | {w for ln in _fenced_lines(CLI_DOC.read_text()) for w in ln.split()}
    missing = sorted(o for o in leaf.options if f"`{o}`" not in section)
    assert not missing, f"`hypermnesia {' '.join(leaf.path)}`: options not in docs/CLI.md: {missing}"
    args = sorted(p for p in leaf.positionals if f"`{p}`" not in section and p not in code)
    assert not args, f"`hypermnesia {' '.join(leaf.path)}`: arguments not in docs/CLI.md: {args}"
    listed = {m for row in _table_rows(section) for m in re.findall(r"`(--[a-z0-9-]+)`", row[0]) if row}
    assert listed <= leaf.options, (
        f"docs/CLI.md lists options `hypermnesia {' '.join(leaf.path)}` does not take: {sorted(listed - leaf.options)}"
    )


def test_every_command_line_in_the_docs_exists() -> None:
    problems = [
        f"{_rel(page)}: {problem}"
        for page in PAGES
        for line in _command_lines(page)
        if (problem := _check_command_line(line))
    ]
    assert not problems, "\n".join(problems)


def test_the_command_line_check_can_fail() -> None:
    """The check above rejects what it should, so its passing means something."""
    assert _check_command_line("hypermnesia map load f.yaml --repo x") is None
    assert _check_command_line("hypermnesia hook session-start|pre-edit|prompt") is None
    assert _check_command_line("hypermnesia nosuch") is not None
    assert _check_command_line("hypermnesia map unload f.yaml") is not None
    assert _check_command_line("hypermnesia ask 'q' --nosuch") is not None
    assert _check_command_line("hypermnesia token --scope x") is not None
    assert _check_command_line("hypermnesia COMMAND --help") is None


# --- the REST API -------------------------------------------------------------------------------


def _routes() -> set[tuple[str, str]]:
    """(method, path) of every route the gateway answers: its OpenAPI document, the routes kept out
    of it (the pages for a browser) and the MCP endpoint."""
    app = create_app(GatewaySettings())
    routes = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
        if method.upper() in HTTP_METHODS
    }
    for route in app.routes:
        for method in getattr(route, "methods", None) or ():
            if method in HTTP_METHODS:
                routes.add((method, route.path))  # type: ignore[attr-defined]
    routes |= {(method, MCP_PATH) for method in ("GET", "POST", "DELETE")}  # MCP's streamable HTTP
    return routes


def _route_key(method: str, path: str) -> tuple[str, str]:
    """A route as a doc may write it: any name for a path parameter, a query string or not."""
    path = path.split("?", 1)[0].rstrip("/") or "/"
    return method, re.sub(r"\{[^}]*\}", "{}", path)


def _mentioned_routes(text: str) -> set[tuple[str, str]]:
    found = set()
    for code in _inline_code(text):
        match = re.fullmatch(rf"({'|'.join(HTTP_METHODS)})((?:\|[A-Z]+)*) (/\S*)", code)
        if match:
            for method in (match.group(1) + match.group(2)).split("|"):
                found.add((method, match.group(3)))
    return found


def test_rest_doc_lists_every_route() -> None:
    documented = {_route_key(m, p) for m, p in _mentioned_routes(REST_DOC.read_text())}
    missing = sorted(f"{m} {p}" for m, p in _routes() if _route_key(m, p) not in documented)
    assert not missing, f"routes not in docs/REST.md: {missing}"


def test_every_route_in_the_docs_exists() -> None:
    known = {_route_key(m, p) for m, p in _routes()}
    problems = [
        f"{_rel(page)}: `{m} {p}`"
        for page in PAGES
        for m, p in sorted(_mentioned_routes(page.read_text()))
        if _route_key(m, p) not in known
    ]
    assert not problems, "routes named in the docs that the gateway does not serve:\n" + "\n".join(problems)


# --- MCP tools ---------------------------------------------------------------------------------


async def test_tools_doc_lists_every_tool() -> None:
    settings = GatewaySettings()
    backends = Backends(settings.retrieval_address, settings.curation_address, settings.rpc_timeout_s)
    try:
        mcp = build_mcp(backends, Authenticator.from_settings(settings, backends.resolve_token), settings)
        listed = {tool.name for tool in await mcp.list_tools()}
    finally:
        await backends.close()
    profiles = {
        match.group(1): row[1]
        for row in _table_rows(_sections(TOOLS_DOC.read_text(), "##")["The tools"])
        if (match := re.fullmatch(r"`([a-z_]+)(?:\(.*\))?`", row[0]))
    }
    documented = set(profiles)
    assert listed - documented == set(), f"tools not in docs/TOOLS.md: {sorted(listed - documented)}"
    assert documented - listed == set(), (
        f"docs/TOOLS.md lists tools that do not exist: {sorted(documented - listed)}"
    )
    wrong = sorted(
        name for name, profile in profiles.items() if (profile == DEFAULT) != (name in DEFAULT_TOOLS)
    )
    assert not wrong, f"docs/TOOLS.md gives these tools the wrong profile: {wrong}"


# --- settings -----------------------------------------------------------------------------------


def _product_files() -> Iterator[Path]:
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "v1" not in path.relative_to(ROOT).parts:
                yield path


def _settings_classes() -> list[type[BaseSettings]]:
    """Every settings class the product defines (found in the source, so a new one counts)."""
    classes: list[type[BaseSettings]] = []
    for path in _product_files():
        tree = ast.parse(path.read_text())
        names = [
            node.name
            for node in tree.body
            if isinstance(node, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id.endswith("Settings") for b in node.bases)
        ]
        if names:
            module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
            classes += [c for n in names if issubclass(c := getattr(module, n), BaseSettings)]
    return classes


def _env_name(cls: type[BaseSettings], field: str) -> str:
    return str(cls.model_config.get("env_prefix", "")).upper() + field.upper()


def _setting_defaults() -> dict[str, list[Any]]:
    """HM_ name -> the defaults it has in the classes that read it."""
    out: dict[str, list[Any]] = {}
    for cls in _settings_classes():
        for name, info in cls.model_fields.items():
            default = None if info.default_factory is not None else info.default
            out.setdefault(_env_name(cls, name), []).append(default)
    return out


def _read_outside_settings() -> set[str]:
    """HM_ names the product reads from the environment itself (a string that is only the name)."""
    names = set()
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"HM_[A-Z0-9_]+", node.value):
                    names.add(node.value)
    return names


def _development_names() -> set[str]:
    """HM_ names the tests and the Makefile read (documented under "Development and tests")."""
    text = (ROOT / "Makefile").read_text() + "".join(p.read_text() for p in (ROOT / "tests").glob("*.py"))
    return set(re.findall(r"\bHM_[A-Z0-9]+(?:_[A-Z0-9]+)*\b", text))


HM_NAME = re.compile(r"\bHM_[A-Z0-9]+(?:_[A-Z0-9]+)*(?![A-Z0-9_*])")


def _settings_rows() -> dict[str, str]:
    """HM_ name -> its default cell, from docs/SETTINGS.md's tables."""
    rows = {}
    for row in _table_rows(SETTINGS_DOC.read_text()):
        match = re.fullmatch(r"`(HM_[A-Z0-9_]+)`", row[0])
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows in docs/SETTINGS.md"
            rows[match.group(1)] = row[1]
    return rows


def _default_written(default: Any, cell: str) -> bool:
    """Whether a default cell states this default (None and empty defaults are described in words)."""
    if default is None or default == "" or default == {}:
        return True
    if isinstance(default, bool):
        return f"`{str(default).lower()}`" in cell
    if isinstance(default, int | float):
        return any(float(n) == float(default) for n in re.findall(r"`(-?[\d.]+)`", cell))
    return f"`{default}`" in cell


def test_settings_doc_lists_every_variable_with_its_default() -> None:
    rows = _settings_rows()
    defaults = _setting_defaults()
    names = set(defaults) | _read_outside_settings()
    missing = sorted(names - set(rows))
    assert not missing, f"variables not in docs/SETTINGS.md: {missing}"
    stale = sorted(
        f"{name}: docs say {rows[name]!r}, the code {values}"
        for name, values in defaults.items()
        if not any(_default_written(v, rows[name]) for v in values)
    )
    assert not stale, "docs/SETTINGS.md states another default:\n" + "\n".join(stale)


def test_every_variable_in_the_docs_exists() -> None:
    known = set(_setting_defaults()) | _read_outside_settings() | _development_names()
    problems = [
        f"{_rel(page)}: {name}"
        for page in PAGES
        for name in sorted(set(HM_NAME.findall(page.read_text())))
        if name not in known
    ]
    assert not problems, "variables named in the docs that nothing reads:\n" + "\n".join(problems)


def test_the_settings_checks_can_fail() -> None:
    assert _default_written(0.15, "`0.15`") and not _default_written(0.15, "`0.55`")
    assert _default_written(True, "`true`") and not _default_written(True, "`false`")
    assert _default_written("adaptive", "`adaptive`") and not _default_written("adaptive", "`rrf`")
    assert HM_NAME.findall("`HM_RATE_*` and `HM_FUSION`, HM_*_PORT") == ["HM_FUSION"]


# --- how it is built ---------------------------------------------------------------------------


def _defines(path: Path, name: str) -> bool:
    """Whether the module defines `name` at its top level, or `Class.method`."""
    tree = ast.parse(path.read_text())
    owner, _, member = name.rpartition(".")
    body = tree.body
    if owner:
        classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner]
        if not classes:
            return False
        body = classes[0].body
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == member:
            return True
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == member for t in targets):
            return True
    return False


def _walk_rows() -> list[tuple[str, list[str]]]:
    """(file, names) of every row of docs/ARCHITECTURE.md's walks."""
    rows = []
    for row in _table_rows(ARCHITECTURE_DOC.read_text()):
        if len(row) >= 3 and re.fullmatch(r"`[\w./]+\.py`", row[1]):
            rows.append((row[1].strip("`"), re.findall(r"`([\w.]+)`", row[2])))
    return rows


def test_architecture_walks_name_modules_and_functions_that_exist() -> None:
    rows = _walk_rows()
    assert len(rows) >= 40, f"docs/ARCHITECTURE.md's walks have {len(rows)} rows; the tables were not found"
    problems = []
    for file, names in rows:
        if not (ROOT / file).is_file():
            problems.append(f"{file}: no such file")
            continue
        problems += [f"{file}: defines no {name}" for name in names if not _defines(ROOT / file, name)]
    assert not problems, "docs/ARCHITECTURE.md:\n" + "\n".join(problems)


def test_the_architecture_check_can_fail() -> None:
    searcher = ROOT / "services" / "retrieval" / "search.py"
    assert _defines(searcher, "Searcher.search") and _defines(searcher, "MODES")
    assert not _defines(searcher, "Searcher.nosuch") and not _defines(searcher, "nosuch")


# --- files, links and the README ----------------------------------------------------------------

REPO_PATH = re.compile(
    r"(?:gateway|services|hypermnesia|tooling|tests|deploy|docs|scripts|protos|ui)/[\w./-]*"
)


def test_every_repository_file_named_in_the_docs_exists() -> None:
    problems = []
    for page in PAGES:
        for code in _inline_code(page.read_text()):
            match = REPO_PATH.match(code.split(" ")[0])
            path = match.group(0).rstrip(".,:") if match else ""
            if path and "*" not in path and not (ROOT / path).exists():
                problems.append(f"{_rel(page)}: {path}")
    assert not problems, "files named in the docs that do not exist:\n" + "\n".join(problems)


def test_every_link_between_the_docs_resolves() -> None:
    problems = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _strip_fences(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                problems.append(f"{_rel(page)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                problems.append(f"{_rel(page)}: {target} (no such heading)")
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_reads_in_five_minutes() -> None:
    words = len(README.read_text().split())
    assert words <= README_MAX_WORDS, f"README.md has {words} words; keep it at most {README_MAX_WORDS}"


def test_readme_leads_to_the_reference() -> None:
    links = set(re.findall(r"\]\((docs/[A-Z_]+\.md)", README.read_text()))
    reference = {
        "docs/CLI.md",
        "docs/REST.md",
        "docs/SETTINGS.md",
        "docs/MAP_FORMAT.md",
        "docs/DEPLOYMENT.md",
    }
    assert reference <= links, f"README.md does not link {sorted(reference - links)}"
