"""tools/import_graph.py on a tree of its own: every import form is an edge (TYPE_CHECKING, function bodies,
relative, `from pkg import module`), tests/, data/ and loose scripts are not; the circles, the longest chain
from plan_request and the plan's walk (stays, returns) are the ones the tree holds."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers import ROOT

TOOL = ROOT / "tools" / "import_graph.py"

TREE = {
    "functions/wheelfoundry/__init__.py": "from wheelfoundry.a import f\n",
    "functions/wheelfoundry/a.py": "from wheelfoundry import b\n\n\ndef f():\n    return b.g()\n",
    "functions/wheelfoundry/b.py": (
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from wheelfoundry.a import f\n\n\n"
        "def g():\n    return 1\n"
    ),
    "functions/wheelfoundry/request.py": "def parse_request(raw, catalog=None, config=None):\n    return raw\n",
    "functions/wheelfoundry/catalog.py": "def load_catalog():\n    return {}\n\n\ndef load_config():\n    return {}\n",
    "functions/wheelfoundry/planning/__init__.py": "not_a_module = 1\n",
    "functions/wheelfoundry/planning/plan.py": (
        "from ..a import f\nfrom . import sizing\nfrom wheelfoundry.planning import not_a_module\n\n\n"
        "def plan_request(request, catalog, config):\n    return sizing.size(request) + f()\n"
    ),
    "functions/wheelfoundry/planning/sizing.py": (
        "import os\nimport wheelfoundry.b\n\n\ndef size(request):\n    def later():\n"
        "        import wheelfoundry.request\n\n    return len(request)\n"
    ),
    "functions/wheelfoundry/data/bundled.py": "import wheelfoundry_cli.main\n",
    "functions/wheelfoundry/__pycache__/stale.py": "import wheelfoundry_cli.main\n",
    "buildspecs/wfbuild/__init__.py": "",
    "buildspecs/wfbuild/run.py": "import numpy\nfrom wheelfoundry.planning.plan import plan_request\n",
    "buildspecs/loose_script.py": "import wheelfoundry_cli.main\n",
    "buildspecs/images/pin.py": "import wheelfoundry_cli.main\n",
    "local/wheelfoundry_local/__init__.py": "from . import server\n",
    "local/wheelfoundry_local/server.py": "from wheelfoundry_local import a_name\nfrom wfbuild.run import main\n",
    "cli/wheelfoundry_cli/__init__.py": "",
    "cli/wheelfoundry_cli/main.py": "from wheelfoundry_local.server import x\nfrom wheelfoundry_user import verify\n",
    "cli/wheelfoundry_user/__init__.py": "",
    "cli/wheelfoundry_user/verify.py": "def check():\n    from wheelfoundry_cli.main import y\n",
    "tests/test_a.py": "import wheelfoundry.a\nimport wheelfoundry_cli.main\n",
    "examples/requests/demo.json": '{"abc": 1}\n',
}

EDGES = {
    ("wheelfoundry", "wheelfoundry.a", ("f",)),
    ("wheelfoundry.a", "wheelfoundry.b", ("b",)),
    ("wheelfoundry.b", "wheelfoundry.a", ("f",)),
    ("wheelfoundry.planning.plan", "wheelfoundry.a", ("f",)),
    ("wheelfoundry.planning.plan", "wheelfoundry.planning.sizing", ("sizing",)),
    ("wheelfoundry.planning.sizing", "wheelfoundry.b", ("wheelfoundry.b",)),
    ("wheelfoundry.planning.sizing", "wheelfoundry.request", ("wheelfoundry.request",)),
    ("wfbuild.run", "wheelfoundry.planning.plan", ("plan_request",)),
    ("wheelfoundry_local", "wheelfoundry_local.server", ("server",)),
    ("wheelfoundry_local.server", "wfbuild.run", ("main",)),
    ("wheelfoundry_cli.main", "wheelfoundry_local.server", ("x",)),
    ("wheelfoundry_cli.main", "wheelfoundry_user.verify", ("verify",)),
    ("wheelfoundry_user.verify", "wheelfoundry_cli.main", ("y",)),
}


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(root: Path, skip: tuple[str, ...] = ()) -> Path:
    for rel, text in TREE.items():
        if rel not in skip:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    return root


def lines(folder: str) -> int:
    return sum(len(t.splitlines()) for r, t in TREE.items() if r.rpartition("/")[0] == folder and r.endswith(".py"))


def test_the_graph_holds_every_import_form_and_only_the_packages(tmp_path: Path) -> None:
    ig = tool()
    graph = ig.Graph(tree(tmp_path))
    assert {(s, d, tuple(sorted(n))) for (s, d), n in graph.edges.items()} == EDGES
    figs = ig.report(graph)
    assert figs["modules"] == 16 and figs["modules_without_init"] == 10 and figs["edges"] == 13
    folders = {
        "functions/wheelfoundry": 4,
        "functions/wheelfoundry/planning": 2,
        "buildspecs/wfbuild": 1,
        "local/wheelfoundry_local": 1,
        "cli/wheelfoundry_cli": 1,
        "cli/wheelfoundry_user": 1,
    }
    assert figs["folders"] == {f: {"modules": n, "lines": lines(f)} for f, n in folders.items()}
    assert figs["lines"] == sum(map(lines, folders)) == 48
    assert figs["circles"] == [
        {
            "modules": ["wheelfoundry.a", "wheelfoundry.b"],
            "edges": [["wheelfoundry.a", "wheelfoundry.b", ["b"]], ["wheelfoundry.b", "wheelfoundry.a", ["f"]]],
        },
        {
            "modules": ["wheelfoundry_cli.main", "wheelfoundry_user.verify"],
            "edges": [
                ["wheelfoundry_cli.main", "wheelfoundry_user.verify", ["verify"]],
                ["wheelfoundry_user.verify", "wheelfoundry_cli.main", ["y"]],
            ],
        },
    ]
    assert figs["chain"] == {
        "start": "wheelfoundry.planning.plan",
        "modules": 4,
        "path": [
            ["wheelfoundry.planning.plan"],
            ["wheelfoundry.planning.sizing"],
            ["wheelfoundry.a", "wheelfoundry.b"],
        ],
    }
    assert figs["problems"] == []


def test_components_and_chain_on_a_plain_graph() -> None:
    ig = tool()
    graph = {"p": {"q", "x"}, "q": {"r"}, "r": {"q", "s"}, "s": set(), "x": {"s"}, "lone": set()}
    comps = ig.components(graph)
    assert sorted(comps) == [["lone"], ["p"], ["q", "r"], ["s"], ["x"]]
    assert ig.longest_chain(graph, comps, "p") == [["p"], ["q", "r"], ["s"]]
    assert ig.walk(["m", "m", "n", "m", "o", "o", "m"]) == {"m": 3, "n": 1, "o": 1}


def test_the_plan_is_traced_through_its_modules_and_folders(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--root", str(tree(tmp_path / "repo")), "--json", str(out), "--trace-plan"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 import circle(s)" in proc.stdout and "13 edges" in proc.stdout
    figs = json.loads(out.read_text())
    assert figs["edges"] == 13 and figs["chain"]["modules"] == 4
    # plan -> sizing -> (back) -> a -> b -> (back) a -> (back) plan: calls and returns, 8 events
    assert {k: v for k, v in figs["trace"].items() if k != "request"} == {
        "events": 8,
        "modules": 4,
        "stays": 6,
        "returns": 2,
        "folders": {
            "functions/wheelfoundry": {"modules": 2, "stays": 1, "returns": 0},
            "functions/wheelfoundry/planning": {"modules": 2, "stays": 2, "returns": 1},
        },
    }


def test_without_a_request_the_trace_says_why_and_exits_2(tmp_path: Path, capsys: object) -> None:
    ig = tool()
    root = tree(tmp_path, skip=("examples/requests/demo.json",))
    before = list(sys.path)
    assert ig.main(["--root", str(root), "--trace-plan"]) == 2
    assert sys.path == before  # refused before it put the fake packages where this process imports from
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert f"no request: {root}/examples/requests holds no *.json" in err
