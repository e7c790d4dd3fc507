"""The map file of a repository (tiers 0/1): parse and validate it, naming file and line.

Shared by the CLI (early validation, before anything is sent) and curation (the check that
counts). Format, YAML (JSON is YAML too); see deploy/examples/hypermnesia-map.yaml:

    version: 1                        # optional
    components:
      - slug: gateway                 # required, unique in the file
        name: Gateway                 # default: the slug
        parent: services              # another component's slug
        responsibility: one sentence
        globs: ["gateway/**"]         # or one string; see hypermnesia.structure_glob
        priority: 0                   # breaks ties between equally specific matches; higher wins
        depends_on: [retrieval]       # shorthand for relationships of kind depends_on
        constraints:                  # this component's rules
          - text: the rule            # required
            id: gw-thin               # default: "<slug>.<n>"
            kind: invariant           # invariant | adr | convention (default convention)
            severity: must            # must | should | info (default should)
            status: active            # active | proposed | retired (default active)
            rationale: why
    constraints: [...]                # global constraints, same fields (default id "global.<n>")
    relationships:
      - {from: gateway, to: curation, kind: calls}   # depends_on | calls | uses

Every problem found is reported, one line each, as "<file>:<line>: <what> <how to fix>".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from hypermnesia.errors import InvalidArgument
from hypermnesia.structure_glob import GlobError, compile_glob

KINDS = ("invariant", "adr", "convention")
SEVERITIES = ("must", "should", "info")
STATUSES = ("active", "proposed", "retired")
RELATIONSHIP_KINDS = ("depends_on", "calls", "uses")

MAX_SOURCE_BYTES = 1_048_576
MAX_COMPONENTS = 2_000
MAX_CONSTRAINTS = 10_000
MAX_GLOBS = 200
MAX_TEXT_CHARS = 4_000
PRIORITY_RANGE = (-1_000, 1_000)
MAX_REPORTED = 25

SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_SLUG_HINT = "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
_STR, _INT, _NULL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:null"

_TOP_KEYS = ("version", "components", "constraints", "relationships")
_COMPONENT_KEYS = (
    "slug",
    "name",
    "parent",
    "responsibility",
    "globs",
    "priority",
    "depends_on",
    "constraints",
)
_CONSTRAINT_KEYS = ("id", "text", "kind", "severity", "status", "rationale")
_RELATIONSHIP_KEYS = ("from", "to", "kind")


@dataclass(frozen=True)
class ConstraintSpec:
    id: str
    component: str | None
    kind: str
    severity: str
    status: str
    text: str
    rationale: str
    line: int


@dataclass(frozen=True)
class ComponentSpec:
    slug: str
    name: str
    parent: str | None
    responsibility: str
    globs: tuple[str, ...]
    priority: int
    line: int
    parent_line: int = 0


@dataclass(frozen=True)
class RelationshipSpec:
    from_slug: str
    to_slug: str
    kind: str
    line: int


@dataclass
class StructureMap:
    components: list[ComponentSpec] = field(default_factory=list)
    constraints: list[ConstraintSpec] = field(default_factory=list)
    relationships: list[RelationshipSpec] = field(default_factory=list)


class MapError(InvalidArgument):
    """The map file is not valid; `problems` are "<file>:<line>: ..." sentences."""

    def __init__(self, source_name: str, problems: list[tuple[int, str]]) -> None:
        ordered = sorted(problems)
        lines = [f"{source_name}:{line}: {text}" for line, text in ordered[:MAX_REPORTED]]
        if len(ordered) > MAX_REPORTED:
            lines.append(f"... and {len(ordered) - MAX_REPORTED} more problems")
        head = (
            f"the map {source_name} is not valid ({len(ordered)} problem{'s' if len(ordered) > 1 else ''}); "
        )
        super().__init__(head + "nothing was changed:\n" + "\n".join(lines))
        self.problems = lines


_REPO = re.compile(r"[\w.:@-]{1,100}")


def check_repo(repo: str) -> str:
    """A repo name as used in scopes ("project:<repo>") and URLs (/map/<repo>)."""
    if not repo or not repo.strip():
        raise InvalidArgument("repo is empty; name the repository, e.g. 'my-repo'")
    if not _REPO.fullmatch(repo) or repo in (".", ".."):
        raise InvalidArgument(
            f"repo {repo[:60]!r} is not a valid name; use 1-100 letters, digits, '.', '_', '-', ':' or '@' "
            "(no '/' or spaces), e.g. 'my-repo'"
        )
    return repo


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _Reader:
    """Walks the composed YAML nodes (which keep their line numbers), collecting problems."""

    def __init__(self) -> None:
        self.problems: list[tuple[int, str]] = []

    def problem(self, node: yaml.Node | int, text: str) -> None:
        self.problems.append((node if isinstance(node, int) else _line(node), text))

    def mapping(self, node: yaml.Node, what: str, keys: tuple[str, ...]) -> dict[str, yaml.Node] | None:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{what} must be a mapping of keys ({', '.join(keys)})")
            return None
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in keys:
                self.problem(
                    key_node, f"{what}: unknown key {str(key)[:40]!r}; the keys are {', '.join(keys)}"
                )
            elif key in out:
                self.problem(
                    key_node,
                    f"{what}: key {key!r} is given twice (first on line {_line(out[key])}); keep one",
                )
            else:
                out[key] = value_node
        return out

    def sequence(self, node: yaml.Node | None, what: str) -> list[yaml.Node]:
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, f"{what} must be a list")
            return []
        return list(node.value)

    def text(self, node: yaml.Node | None, what: str, *, required: bool = False, default: str = "") -> str:
        """A scalar as written (so `name: no` stays "no"); null counts as absent."""
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL):
            if required and node is not None:
                self.problem(node, f"{what} is required and may not be empty")
            return default
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, f"{what} must be a single value, not a list or mapping")
            return default
        value = str(node.value)
        if required and not value.strip():
            self.problem(node, f"{what} is required and may not be empty")
        elif len(value) > MAX_TEXT_CHARS:
            self.problem(node, f"{what} is {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,}")
        elif "\x00" in value:
            self.problem(node, f"{what} contains a NUL character; remove it")
        return value

    def slug(self, node: yaml.Node | None, what: str) -> str | None:
        if node is None:
            return None
        value = self.text(node, what)
        if not SLUG.fullmatch(value):
            self.problem(node, f"{what} {value[:40]!r} is not a slug; use {_SLUG_HINT}")
            return None
        return value

    def choice(self, node: yaml.Node | None, what: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.text(node, what, default=default)
        if value not in allowed:
            assert node is not None
            self.problem(node, f"{what} {value[:40]!r} is not one of {' | '.join(allowed)}")
            return default
        return value


def _compose(text: str, source_name: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise MapError(source_name, [(line, f"not valid YAML: {exc.problem or exc.context}")]) from exc
    except yaml.YAMLError as exc:
        raise MapError(source_name, [(1, f"not valid YAML: {exc}")]) from exc
    except RecursionError as exc:  # the composer recurses once per nesting level
        raise MapError(
            source_name, [(1, "lists or mappings are nested too deeply; a map is a few levels deep")]
        ) from exc


def parse_map(text: str, source_name: str) -> StructureMap:
    """Parse and check a map file; raises MapError listing every problem with its line."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        raise MapError(
            source_name, [(1, f"the file is larger than {MAX_SOURCE_BYTES:,} bytes; split the map")]
        )
    root = _compose(text, source_name)
    if root is None:
        raise MapError(source_name, [(1, "the file is empty; it needs a 'components:' list")])
    r = _Reader()
    top = r.mapping(root, "the map", _TOP_KEYS)
    out = StructureMap()
    if top is not None:
        if "version" in top and r.text(top["version"], "version") != "1":
            r.problem(top["version"], "version must be 1 (the only format so far)")
        components = r.sequence(top.get("components"), "components")
        if len(components) > MAX_COMPONENTS:
            r.problem(top["components"], f"{len(components):,} components; the limit is {MAX_COMPONENTS:,}")
            components = []
        for node in components:
            _component(r, node, out)
        for node in r.sequence(top.get("relationships"), "relationships"):
            _relationship(r, node, out)
        for index, node in enumerate(r.sequence(top.get("constraints"), "constraints"), 1):
            _constraint(r, node, None, f"global.{index}", out)
        if not components and not out.constraints and not r.problems:
            r.problem(root, "the map has no components and no constraints; add a 'components:' list")
        if len(out.constraints) > MAX_CONSTRAINTS:
            r.problem(root, f"{len(out.constraints):,} constraints; the limit is {MAX_CONSTRAINTS:,}")
        _cross_check(r, out)
    if r.problems:
        raise MapError(source_name, r.problems)
    return out


def _component(r: _Reader, node: yaml.Node, out: StructureMap) -> None:
    fields = r.mapping(node, "a component", _COMPONENT_KEYS)
    if fields is None:
        return
    if "slug" not in fields:
        r.problem(node, "a component has no 'slug'; give each component a unique slug")
        return
    slug = r.slug(fields["slug"], "slug")
    if slug is None:
        return
    what = f"component {slug!r}"
    glob_nodes = fields.get("globs")
    if isinstance(glob_nodes, yaml.ScalarNode) and glob_nodes.tag != _NULL:
        glob_nodes = yaml.SequenceNode("tag:yaml.org,2002:seq", [glob_nodes], glob_nodes.start_mark)
    globs: list[str] = []
    items = r.sequence(glob_nodes, f"{what}: globs")
    if len(items) > MAX_GLOBS:
        r.problem(items[0], f"{what}: {len(items)} globs; the limit is {MAX_GLOBS}")
        items = []
    for glob_node in items:
        pattern = r.text(glob_node, f"{what}: a glob", required=True)
        try:
            compile_glob(pattern)
        except GlobError as exc:
            r.problem(glob_node, f"{what}: glob {pattern[:80]!r} {exc}")
            continue
        globs.append(pattern)
    priority = 0
    if "priority" in fields:
        p_node = fields["priority"]
        if not (isinstance(p_node, yaml.ScalarNode) and p_node.tag == _INT):
            r.problem(p_node, f"{what}: priority must be a whole number")
        else:
            priority = int(yaml.SafeLoader("").construct_yaml_int(p_node))
            low, high = PRIORITY_RANGE
            if not low <= priority <= high:
                r.problem(p_node, f"{what}: priority {priority} is outside {low}..{high}")
                priority = 0
    parent_node = fields.get("parent")
    parent = r.slug(parent_node, f"{what}: parent") if parent_node is not None else None
    out.components.append(
        ComponentSpec(
            slug=slug,
            name=r.text(fields.get("name"), f"{what}: name", default=slug) or slug,
            parent=parent,
            responsibility=r.text(fields.get("responsibility"), f"{what}: responsibility"),
            globs=tuple(globs),
            priority=priority,
            line=_line(node),
            parent_line=_line(parent_node) if parent_node is not None else 0,
        )
    )
    for dep_node in r.sequence(fields.get("depends_on"), f"{what}: depends_on"):
        dep = r.slug(dep_node, f"{what}: depends_on entry")
        if dep is not None:
            out.relationships.append(RelationshipSpec(slug, dep, "depends_on", _line(dep_node)))
    for index, c_node in enumerate(r.sequence(fields.get("constraints"), f"{what}: constraints"), 1):
        _constraint(r, c_node, slug, f"{slug}.{index}", out)


def _constraint(
    r: _Reader, node: yaml.Node, component: str | None, default_id: str, out: StructureMap
) -> None:
    what = f"a constraint of component {component!r}" if component else "a global constraint"
    fields = r.mapping(node, what, _CONSTRAINT_KEYS)
    if fields is None:
        return
    if "text" not in fields:
        r.problem(node, f"{what} has no 'text'; write the rule itself in 'text'")
        return
    cid = r.slug(fields["id"], "constraint id") if "id" in fields else default_id
    out.constraints.append(
        ConstraintSpec(
            id=cid or default_id,
            component=component,
            kind=r.choice(fields.get("kind"), "kind", KINDS, "convention"),
            severity=r.choice(fields.get("severity"), "severity", SEVERITIES, "should"),
            status=r.choice(fields.get("status"), "status", STATUSES, "active"),
            text=r.text(fields["text"], "constraint text", required=True),
            rationale=r.text(fields.get("rationale"), "rationale"),
            line=_line(node),
        )
    )


def _relationship(r: _Reader, node: yaml.Node, out: StructureMap) -> None:
    fields = r.mapping(node, "a relationship", _RELATIONSHIP_KEYS)
    if fields is None:
        return
    if "from" not in fields or "to" not in fields:
        r.problem(node, "a relationship needs both 'from' and 'to' (component slugs)")
        return
    src = r.slug(fields["from"], "relationship 'from'")
    dst = r.slug(fields["to"], "relationship 'to'")
    kind = r.choice(fields.get("kind"), "relationship kind", RELATIONSHIP_KINDS, "depends_on")
    if src is not None and dst is not None:
        out.relationships.append(RelationshipSpec(src, dst, kind, _line(node)))


def _cross_check(r: _Reader, out: StructureMap) -> None:
    """References between entries: unique slugs and ids, known targets, no parent cycles."""
    first_line = _first_lines(
        r,
        [(comp.slug, comp.line) for comp in out.components],
        lambda slug, first: (
            f"component slug {slug!r} is used twice (first on line {first}); slugs are unique per repository"
        ),
    )
    parents: dict[str, str] = {}
    for comp in out.components:
        if comp.parent is None:
            continue
        if comp.parent not in first_line:
            r.problem(comp.parent_line, _unknown(f"component {comp.slug!r}: parent {comp.parent!r}"))
        elif comp.parent == comp.slug:
            r.problem(comp.parent_line, f"component {comp.slug!r} is its own parent; remove 'parent'")
        else:
            parents.setdefault(comp.slug, comp.parent)
    _parent_cycles(r, out, parents, first_line)
    seen_edges: dict[tuple[str, str], int] = {}
    for rel in out.relationships:
        for end in (rel.from_slug, rel.to_slug):
            if end not in first_line:
                r.problem(rel.line, _unknown(f"relationship {rel.from_slug} -> {rel.to_slug}: {end!r}"))
        if rel.from_slug == rel.to_slug:
            r.problem(rel.line, f"component {rel.from_slug!r} depends on itself; remove that relationship")
        edge = (rel.from_slug, rel.to_slug)
        if edge in seen_edges:
            r.problem(
                rel.line,
                f"relationship {rel.from_slug} -> {rel.to_slug} is given twice "
                f"(first on line {seen_edges[edge]}); keep one",
            )
        else:
            seen_edges[edge] = rel.line
    _first_lines(
        r,
        [(con.id, con.line) for con in out.constraints],
        lambda con_id, first: (
            f"constraint id {con_id!r} is used twice (first on line {first}); give each constraint its own id"
        ),
    )


def _unknown(reference: str) -> str:
    return f"{reference} is not a component of this map; add it or fix the slug"


def _first_lines(
    r: _Reader, entries: list[tuple[str, int]], repeated: Callable[[str, int], str]
) -> dict[str, int]:
    """The line each key first stands on; a later one is a problem worded by repeated(key, first line)."""
    first: dict[str, int] = {}
    for key, line in entries:
        if key in first:
            r.problem(line, repeated(key, first[key]))
        else:
            first[key] = line
    return first


def _parent_cycles(r: _Reader, out: StructureMap, parents: dict[str, str], lines: dict[str, int]) -> None:
    reported: set[str] = set()
    for start in parents:
        chain = [start]
        node = start
        while node in parents and parents[node] not in chain:
            node = parents[node]
            chain.append(node)
        if node in parents and parents[node] in chain:
            cycle = chain[chain.index(parents[node]) :]
            if reported.isdisjoint(cycle):
                reported.update(cycle)
                loop = " -> ".join([*cycle, cycle[0]])
                r.problem(lines[cycle[0]], f"parents form a cycle: {loop}; the components must form a tree")
