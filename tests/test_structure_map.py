"""The map file format and the glob rules (pure functions: no services needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypermnesia.errors import InvalidArgument
from hypermnesia.structure_glob import GlobError, compile_glob, normalize_path
from hypermnesia.structure_map import MapError, check_repo, parse_map

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("src/**", "src/a.py", True),
        ("src/**", "src/a/b/c.py", True),
        ("src/**", "src", False),
        ("src/**", "srcx/a.py", False),
        ("src/**/test_*.py", "src/test_a.py", True),
        ("src/**/test_*.py", "src/x/y/test_a.py", True),
        ("src/**/test_*.py", "src/x/a_test.py", False),
        ("**/*.md", "README.md", True),
        ("**/*.md", "docs/a/b.md", True),
        ("*.py", "a/b.py", False),
        ("src/*.py", "src/a/b.py", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file12.txt", False),
        ("a?b", "a/b", False),
        ("v[0-9].txt", "v7.txt", True),
        ("v[0-9].txt", "vx.txt", False),
        ("v[!0-9].txt", "vx.txt", True),
        ("v[^0-9].txt", "v7.txt", False),
        ("x[!a]y", "x/y", False),
        ("[]]x", "]x", True),
        ("a\\*b", "a*b", True),
        ("a\\*b", "axb", False),
        ("a+b(c).py", "a+b(c).py", True),
    ],
)
def test_glob_matching(glob: str, path: str, matches: bool) -> None:
    assert compile_glob(glob).matches(path) is matches


@pytest.mark.parametrize(
    ("more", "less"),
    [
        ("src/api/**", "src/**"),  # the deeper directory
        ("services/retrieval/**", "services/*/server.py"),  # literal prefix first
        ("web/static/*.js", "web/static/**"),  # same prefix: more literal characters
        ("docs/api/**", "docs/**/*.md"),
    ],
)
def test_specificity_order(more: str, less: str) -> None:
    assert compile_glob(more).specificity > compile_glob(less).specificity


@pytest.mark.parametrize(
    ("glob", "fragment"),
    [
        ("src/[abc", "unbalanced '[' at column 5"),
        ("src/x[!", "unbalanced '['"),
        ("v[9-0]", "reversed range '9-0'"),
        ("/src/**", "drop the leading '/'"),
        ("src/", "write 'src/**'"),
        ("a//b", "empty, '.' or '..' path segment"),
        ("a/../b", "'..' path segment"),
        ("", "is empty"),
        ("a\\", "lone '\\'"),
    ],
)
def test_bad_globs_say_how_to_fix(glob: str, fragment: str) -> None:
    with pytest.raises(GlobError) as err:
        compile_glob(glob)
    assert fragment in str(err.value)


def test_paths_are_normalised_or_refused() -> None:
    assert normalize_path("./src//api/x.py") == "src/api/x.py"
    assert normalize_path("src/api/") == "src/api"
    for bad, fragment in [
        ("/abs/x.py", "is absolute"),
        ("../x", "contains '..'"),
        ("", "path is empty"),
        ("a\nb", "control characters"),
        ("./", "names no file"),
    ]:
        with pytest.raises(InvalidArgument) as err:
            normalize_path(bad)
        assert fragment in err.value.message


def test_repo_names() -> None:
    assert check_repo("my-repo") == "my-repo"
    assert check_repo("org:repo@v2") == "org:repo@v2"
    for bad in ("", "a/b", "two words", "x\n", "..", "r" * 101):
        with pytest.raises(InvalidArgument):
            check_repo(bad)


GOOD = """\
components:
  - slug: a
    globs: "a/**"
    priority: 0x10
    name: no
    constraints:
      - text: first
      - text: second
        id: custom
constraints:
  - text: global one
"""


def test_defaults_shorthands_and_ids() -> None:
    parsed = parse_map(GOOD, "m.yaml")
    (comp,) = parsed.components
    assert comp.globs == ("a/**",) and comp.priority == 16 and comp.name == "no"  # as written, not False
    assert [(c.id, c.component, c.kind, c.severity, c.status) for c in parsed.constraints] == [
        ("a.1", "a", "convention", "should", "active"),
        ("custom", "a", "convention", "should", "active"),
        ("global.1", None, "convention", "should", "active"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "components:\n  - slug: a\n    globs:\n      - ok/**\n      - bad/[x\n",
            "m.yaml:5: component 'a': glob 'bad/[x' has an unbalanced '['",
        ),
        (
            "components:\n  - slug: a\n  - slug: b\n  - slug: a\n",
            "m.yaml:4: component slug 'a' is used twice (first on line 2)",
        ),
        (
            "components:\n  - slug: a\n    parent: nope\n",
            "m.yaml:3: component 'a': parent 'nope' is not a component",
        ),
        (
            "components:\n  - slug: a\n    depends_on: [b]\n",
            "m.yaml:3: relationship a -> b: 'b' is not a component",
        ),
        (
            "components:\n  - slug: a\n    parent: b\n  - slug: b\n    parent: a\n",
            "m.yaml:2: parents form a cycle: a -> b -> a",
        ),
        (
            "components:\n  - slug: a\n    constraints:\n      - text: x\n        severity: sometimes\n",
            "m.yaml:5: severity 'sometimes' is not one of must | should | info",
        ),
        (
            "constraints:\n  - text: x\n    kind: law\n",
            "m.yaml:3: kind 'law' is not one of invariant | adr | convention",
        ),
        (
            "constraints:\n  - text: x\n    status: maybe\n",
            "m.yaml:3: status 'maybe' is not one of active | proposed | retired",
        ),
        (
            "components:\n  - slug: a\nrelationships:\n  - {from: a, to: a}\n",
            "m.yaml:4: component 'a' depends on itself",
        ),
        ("components:\n  - slug: a\n    glob: x/**\n", "m.yaml:3: a component: unknown key 'glob'"),
        ("components:\n  - slug: a\n    slug: b\n", "m.yaml:3: a component: key 'slug' is given twice"),
        ("components:\n  - slug: Bad Slug\n", "m.yaml:2: slug 'Bad Slug' is not a slug"),
        (
            "components:\n  - slug: a\n    priority: high\n",
            "m.yaml:3: component 'a': priority must be a whole number",
        ),
        ("constraints:\n  - kind: adr\n", "m.yaml:2: a global constraint has no 'text'"),
        (
            "constraints:\n  - {id: x, text: a}\n  - {id: x, text: b}\n",
            "m.yaml:3: constraint id 'x' is used twice",
        ),
        ("components: [\n  {slug: a,\n", "m.yaml:3: not valid YAML"),
        ("", "m.yaml:1: the file is empty"),
        ("a: " + "[" * 50_000, "m.yaml:1: lists or mappings are nested too deeply"),
        ("- just\n- a list\n", "m.yaml:1: the map must be a mapping"),
        ("version: 2\ncomponents:\n  - slug: a\n", "m.yaml:1: version must be 1"),
    ],
)
def test_invalid_maps_name_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(MapError) as err:
        parse_map(text, "m.yaml")
    assert expected in err.value.message, err.value.message
    assert "nothing was changed" in err.value.message


def test_every_problem_is_reported_at_once() -> None:
    text = "components:\n  - slug: a\n    globs: ['x/[']\n    parent: zz\n  - slug: a\n"
    with pytest.raises(MapError) as err:
        parse_map(text, "m.yaml")
    assert len(err.value.problems) == 3
    assert [p.split(":")[1] for p in err.value.problems] == ["3", "4", "5"]


def test_example_map_of_this_repository_is_valid() -> None:
    parsed = parse_map((ROOT / "deploy/examples/hypermnesia-map.yaml").read_text(), "hypermnesia-map.yaml")
    slugs = {c.slug for c in parsed.components}
    assert {"gateway", "retrieval", "curation", "embedder", "protos", "hypermnesia"} <= slugs
    assert any("never edited by hand" in c.text for c in parsed.constraints)
