"""The house's layout as a contract: the layers stay apart, each room imports only the rooms its row allows,
there is no import circle and no module over 400 lines.

functions/ is what `sam build` ships (template.yaml CodeUri): every module there is either a handler or in a
handler's import closure, and it never imports the command line, the embedded AWS or the on-instance runner.
The command line (cli/wheelfoundry_cli) assembles itself from the Lambda package, the embedded AWS (local/)
and the user's commands (cli/wheelfoundry_user), never the other way.

Rooms: the subpackages of the Lambda package (``wheelfoundry``) and of the runner's (``wfbuild``); the modules
at a package's top are its ground. Which room may import which is a table here, in the spirit of
import-linter's layers contract, read from the code's own imports (tools/import_graph.py: every explicit
import, ``if TYPE_CHECKING:`` and function bodies included). docs/architecture.md says what each room owns.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import ROOT

FUNCTIONS = ROOT / "functions"
OUTSIDE = ("wheelfoundry_cli", "wheelfoundry_local", "wheelfoundry_user", "wfbuild", "tools", "tests")


def _module(path: Path) -> str:
    parts = path.relative_to(FUNCTIONS).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


MODULES = {_module(p): _imports(p) for p in FUNCTIONS.rglob("*.py")}


def test_nothing_under_functions_imports_the_command_line_the_emulator_or_the_runner() -> None:
    bad = {
        module: sorted(name for name in names if name.split(".")[0] in OUTSIDE)
        for module, names in MODULES.items()
        if any(name.split(".")[0] in OUTSIDE for name in names)
    }
    assert bad == {}


def test_every_module_under_functions_is_reached_from_a_handler() -> None:
    seen: set[str] = set()
    todo = [m for m in MODULES if m.startswith("wheelfoundry.handlers.")]
    while todo:
        module = todo.pop()
        if module in seen or module not in MODULES:
            continue
        seen.add(module)
        todo += list(MODULES[module])
    packages = {m for m in MODULES if (FUNCTIONS / m.replace(".", "/") / "__init__.py").exists()}
    assert sorted(set(MODULES) - seen - packages) == []


def test_the_check_sees_a_bad_import(tmp_path: Path) -> None:
    """The scan itself: a module importing the CLI is caught (so the first test can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nfrom wheelfoundry_cli.main import main\n")
    assert "wheelfoundry_cli.main" in _imports(bad)
    assert any(name.split(".")[0] in OUTSIDE for name in _imports(bad))


# ----- rooms ---------------------------------------------------------------------------------------------
LONGEST = 400

# Each room, and the rooms it may import (its own package's ground is always allowed). Read bottom-up: the
# Lambda package's rooms form one order, ground < catalog < toolkits < request < planning | publishing <
# watch < aws < handlers, and so do the runner's.
MAY_IMPORT: dict[str, set[str]] = {
    "wheelfoundry.catalog": set(),
    "wheelfoundry.toolkits": {"catalog"},
    "wheelfoundry.request": {"catalog", "toolkits"},
    "wheelfoundry.planning": {"catalog", "toolkits", "request"},
    "wheelfoundry.publishing": {"request"},
    "wheelfoundry.watch": {"catalog", "toolkits", "request", "planning", "publishing"},
    "wheelfoundry.aws": {"catalog", "toolkits", "request", "planning", "publishing", "watch"},
    "wheelfoundry.handlers": {"catalog", "toolkits", "request", "planning", "publishing", "watch", "aws"},
    "wfbuild.wheels": set(),
    "wfbuild.stages": {"wheels"},
    "wfbuild.compiling": {"stages", "wheels"},
    "wfbuild.cuda": set(),
    "wfbuild.images": {"wheels"},
    "wfbuild.runner": {"wheels", "stages", "compiling", "cuda", "images"},
    "wfbuild.gpu": {"wheels", "stages", "cuda", "runner"},
}
GROUND_MAY_IMPORT: set[str] = set()  # a package's ground modules import no room of their package
# The Lambda package ships alone and the runner's bundle alone: neither imports another product package.
ALONE = {"wheelfoundry", "wfbuild"}
PRODUCT = {"wheelfoundry", "wfbuild", "wheelfoundry_local", "wheelfoundry_cli", "wheelfoundry_user"}


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def graph() -> object:
    return _tool().Graph(ROOT)


def room_of(graph: object, module: str) -> str:
    """``wheelfoundry.planning`` for wheelfoundry.planning.walltime; the package itself for its ground."""
    parts = module.split(".")
    files: dict[str, Path] = graph.files  # type: ignore[attr-defined]
    if parts[0] in ALONE and len(parts) > 1 and (files[".".join(parts[:2])].name == "__init__.py"):
        return ".".join(parts[:2])
    return parts[0]


def test_every_room_of_the_two_packages_is_in_the_table(graph: object) -> None:
    files: dict[str, Path] = graph.files  # type: ignore[attr-defined]
    rooms = {room_of(graph, m) for m in files if m.split(".")[0] in ALONE} - ALONE
    assert rooms == set(MAY_IMPORT), "a new room needs its row in MAY_IMPORT (and a line in docs/architecture.md)"


def test_rooms_import_only_what_their_row_allows(graph: object) -> None:
    edges: dict[tuple[str, str], set[str]] = graph.edges  # type: ignore[attr-defined]
    broken = []
    for (importer, imported), names in sorted(edges.items()):
        package = importer.split(".")[0]
        if package not in ALONE or imported.split(".")[0] != package:
            continue
        here, there = room_of(graph, importer), room_of(graph, imported)
        if here == there or there == package:
            continue
        allowed = GROUND_MAY_IMPORT if here == package else MAY_IMPORT[here]
        if there.split(".", 1)[1] not in allowed:
            broken.append(f"{importer} -> {imported} ({', '.join(sorted(names))}): {here} may not import {there}")
    assert not broken, "\n".join(broken)


def test_the_lambda_package_and_the_runner_import_no_other_product_package(graph: object) -> None:
    edges: dict[tuple[str, str], set[str]] = graph.edges  # type: ignore[attr-defined]
    outside = sorted(
        f"{a} -> {b}"
        for a, b in edges
        if a.split(".")[0] in ALONE and b.split(".")[0] in PRODUCT and b.split(".")[0] != a.split(".")[0]
    )
    assert not outside, "\n".join(outside)


def test_no_import_circles(graph: object) -> None:
    tool = _tool()
    succ: dict[str, set[str]] = graph.succ  # type: ignore[attr-defined]
    circles = [c for c in tool.components(succ) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def test_no_module_over_the_limit(graph: object) -> None:
    lines: dict[str, int] = graph.lines  # type: ignore[attr-defined]
    over = {m: n for m, n in lines.items() if n > LONGEST}
    assert not over, f"modules over {LONGEST} lines: {over}"


def test_the_contract_can_fail(tmp_path: Path) -> None:
    """The checks above see a wrong arrow, a circle through a TYPE_CHECKING import and a long module, in a tree
    made to have each."""
    package = tmp_path / "functions" / "wheelfoundry"
    for room in ("catalog", "request"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text('"""A room."""\n')
    (package / "__init__.py").write_text("")
    (package / "request" / "model.py").write_text("X = 1\n")
    (package / "catalog" / "a.py").write_text(
        "from wheelfoundry.catalog import b\nfrom wheelfoundry.request.model import X\n"
    )
    (package / "catalog" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from wheelfoundry.catalog.a import Y\n"
        + "Z = 1\n" * LONGEST
    )
    tool = _tool()
    graph = tool.Graph(tmp_path)
    rooms = defaultdict(set)
    for a, b in graph.edges:
        rooms[room_of(graph, a)].add(room_of(graph, b))
    assert "wheelfoundry.request" in rooms["wheelfoundry.catalog"]
    assert "request" not in MAY_IMPORT["wheelfoundry.catalog"]  # so the row test would name catalog.a
    assert [sorted(c) for c in tool.components(graph.succ) if len(c) > 1] == [
        ["wheelfoundry.catalog.a", "wheelfoundry.catalog.b"]
    ]
    assert max(graph.lines.values()) > LONGEST
