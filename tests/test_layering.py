"""The layers stay apart: the Lambda package never imports the command line, the embedded AWS or the
on-instance runner, and holds nothing that only they use.

functions/ is what `sam build` ships (template.yaml CodeUri): every module there is either a handler or
in a handler's import closure. The command line (cli/wheelfoundry_cli) assembles itself from the Lambda
package, the embedded AWS (local/) and the user's commands (cli/wheelfoundry_user), never the other way.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
