"""The product's import graph: folders, circles, the longest chain from plan_request, and what a plan walks.

    .venv/bin/python tools/import_graph.py [--root DIR] [--json FILE] [--trace-plan [--request FILE]]

Modules move between folders; this says whether a move untangled anything. The graph is static (ast), so any
layout works, a half-moved one too: the packages under functions/, buildspecs/, local/ and cli/ (not tests/,
data/ folders or loose scripts). An edge is an explicit import anywhere in a file, ``if TYPE_CHECKING:`` and
function bodies included, since a move must keep each; not the parents an import initialises, nor a module's
import of its own (ancestor) package, which has run before it whatever it imports. Circles: the strongly
connected components of more than one module; the chain: the longest path, in modules, through their
condensation from the module that defines ``plan_request``.

``--trace-plan`` imports that module from --root, plans the first examples/requests/*.json ``parse_request``
accepts (or --request) and records each Python call and return inside its top package: a "stay" is a run of
events in one module (folder, per folder), a "return" a stay in one left before. No plan: the reason, exit 2.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("functions", "buildspecs", "local", "cli")
SKIP = {"__pycache__", "data"}
WANTED = ("plan_request", "parse_request", "load_catalog", "load_config")


class Graph:
    """The modules of every package under the source folders, their lines and their explicit imports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path] = {}  # module -> file
        self.lines: dict[str, int] = {}
        self.edges: dict[tuple[str, str], set[str]] = defaultdict(set)  # (importer, imported) -> names
        self.succ: dict[str, set[str]] = defaultdict(set)
        self.defs: dict[str, list[str]] = defaultdict(list)  # a top-level function's name -> its modules
        self.problems: list[str] = []
        trees: list[tuple[str, ast.Module]] = []
        for source in SOURCES:
            for path in sorted((root / source).glob("*/**/*.py")):
                parts = path.relative_to(root / source).with_suffix("").parts
                if SKIP & set(parts) or not all(p.isidentifier() for p in parts):
                    continue
                if not (root / source / parts[0] / "__init__.py").is_file():
                    continue  # a folder of scripts, not a package
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                if name in self.files:
                    self.problems.append(f"{name} is both {self.files[name]} and {path}; kept the first")
                    continue
                text = path.read_text(encoding="utf-8", errors="replace")
                self.files[name], self.lines[name], self.succ[name] = path, len(text.splitlines()), set()
                try:
                    trees.append((name, ast.parse(text, str(path))))
                except SyntaxError as exc:  # a file half-edited by a move: counted, without edges
                    self.problems.append(f"{path.relative_to(root)}: {exc.msg} (line {exc.lineno})")
        for name, tree in trees:  # every module is known before the first import is resolved
            self._collect(name, tree)

    def _collect(self, name: str, tree: ast.Module) -> None:
        package = name if self.files[name].name == "__init__.py" else name.rpartition(".")[0]
        for top in tree.body:
            if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) and top.name in WANTED:
                self.defs[top.name].append(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._edge(name, alias.name, alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: package.count(".") + 2 - node.level]
                    if node.level > package.count(".") + 1:
                        self.problems.append(f"{name}: a relative import above its top package")
                        continue
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    self._edge(name, sub if sub in self.files else base, alias.name)

    def _edge(self, name: str, target: str, label: str) -> None:
        while target and target not in self.files:  # `import a.b.c` of a name inside a.b: the module a.b
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):
            self.edges[(name, target)].add(label)
            self.succ[name].add(target)

    def folder(self, name: str) -> str:
        return str(self.files[name].parent.relative_to(self.root))


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (a deep chain would pass the recursion limit);
    each comes after every component it reaches."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    work: list[tuple[str, Iterator[str]]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work.append((start, iter(sorted(graph[start]))))
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    work.append((child, iter(sorted(graph[child]))))
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    break
                if child in stack:  # a list: fine for a few hundred modules
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    found.append(sorted(stack[stack.index(node) :]))
                    del stack[stack.index(node) :]
    return found


def longest_chain(graph: dict[str, set[str]], comps: list[list[str]], start: str) -> list[list[str]]:
    """The path of components from ``start``'s that holds the most modules."""
    owner = {m: i for i, comp in enumerate(comps) for m in comp}
    best: list[tuple[int, list[list[str]]]] = []  # per component: the most modules a path from it holds, the path
    for i, comp in enumerate(comps):  # the components it reaches come first, so theirs are known
        nexts = sorted({owner[d] for m in comp for d in graph[m]} - {i}, key=lambda j: comps[j][0])
        tail = max((best[j] for j in nexts), key=lambda b: b[0], default=(0, []))
        best.append((len(comp) + tail[0], [comp, *tail[1]]))
    return best[owner[start]][1]


def walk(places: list[str]) -> dict[str, int]:
    """Stays in each place of a sequence (all but a place's first stay are returns)."""
    stays: dict[str, int] = defaultdict(int)
    for i, place in enumerate(places):
        stays[place] += i == 0 or places[i - 1] != place
    return dict(stays)


def trace_plan(graph: Graph, request_file: Path | None) -> dict[str, Any] | str:
    """The plan's walk through its package, or why there is none."""
    folder = graph.root / "examples" / "requests"
    requests = [request_file] if request_file else sorted(folder.glob("*.json"))
    if not requests:
        return f"no request: {folder} holds no *.json"
    if not graph.defs["plan_request"]:
        return f"no module under {graph.root} defines plan_request"
    top = graph.defs["plan_request"][0].split(".")[0]
    sys.path[:0] = [str(graph.root / source) for source in SOURCES]
    funcs: dict[str, Any] = {}
    for wanted in WANTED:  # what the tests build a plan with; the planner's own package first
        owners = sorted(graph.defs[wanted], key=lambda m: m.split(".")[0] != top)
        if not owners:
            return f"no module under {graph.root} defines {wanted}, which a request and a plan need"
        try:
            funcs[wanted] = getattr(importlib.import_module(owners[0]), wanted)
        except Exception as exc:
            return f"importing {wanted} from {owners[0]} failed: {type(exc).__name__}: {exc}"
    refusals: list[str] = []
    try:
        catalog, config = funcs["load_catalog"](), funcs["load_config"]()
        for path in requests:
            try:
                request = funcs["parse_request"](json.loads(path.read_text()), catalog, config)
                break
            except Exception as exc:
                refusals.append(f"{path.name}: {type(exc).__name__}: {str(exc)[:200]}")
        else:
            return "parse_request accepted no request: " + "; ".join(refusals)
    except Exception as exc:
        return f"load_catalog() or load_config() failed: {type(exc).__name__}: {exc}"
    top_dir, by_file = f"{graph.files[top].parent}/", {str(file): m for m, file in graph.files.items()}
    events: list[str] = []

    def record(frame: FrameType, event: str, arg: object) -> None:
        if event in ("call", "return") and frame.f_code.co_filename.startswith(top_dir):
            events.append(by_file.get(frame.f_code.co_filename, frame.f_code.co_filename))

    sys.setprofile(record)
    try:
        funcs["plan_request"](request, catalog, config)
    except Exception as exc:
        return f"plan_request({path.name}) failed: {type(exc).__name__}: {exc}"
    finally:
        sys.setprofile(None)
    folder_of = {m: graph.folder(m) if m in graph.files else str(Path(m).parent) for m in set(events)}
    modules, folders = walk(events), walk([folder_of[m] for m in events])
    return {
        "request": str(path),
        "events": len(events),
        "modules": len(modules),
        "stays": sum(modules.values()),
        "returns": sum(modules.values()) - len(modules),
        "folders": {
            f: {"modules": sum(folder_of[m] == f for m in modules), "stays": n, "returns": n - 1}
            for f, n in sorted(folders.items())
        },
    }


def report(graph: Graph) -> dict[str, Any]:
    comps = components(graph.succ)
    folders: dict[str, dict[str, int]] = defaultdict(lambda: {"modules": 0, "lines": 0})
    for name, file in graph.files.items():
        folders[graph.folder(name)]["modules"] += file.name != "__init__.py"
        folders[graph.folder(name)]["lines"] += graph.lines[name]
    circles = [
        {
            "modules": c,
            "edges": [[s, d, sorted(graph.edges[(s, d)])] for s in c for d in sorted(graph.succ[s]) if d in c],
        }
        for c in sorted((c for c in comps if len(c) > 1), key=lambda c: (-len(c), c))
    ]
    planner = graph.defs["plan_request"][0] if graph.defs["plan_request"] else None
    chain = longest_chain(graph.succ, comps, planner) if planner else []
    return {
        "root": str(graph.root),
        "folders": dict(sorted(folders.items())),
        "modules": len(graph.files),
        "modules_without_init": sum(f["modules"] for f in folders.values()),
        "lines": sum(graph.lines.values()),
        "edges": len(graph.edges),
        "circles": circles,
        "chain": {"start": planner, "modules": sum(map(len, chain)), "path": chain},
        "problems": graph.problems,
    }


def show(figs: dict[str, Any]) -> None:
    width = max([len(f) for f in figs["folders"]] + [6])
    rows = [*figs["folders"].items(), ("total", {"modules": figs["modules_without_init"], "lines": figs["lines"]})]
    print(f"{'folder':<{width}} {'modules':>7} {'lines':>7}")
    print("\n".join(f"{folder:<{width}} {row['modules']:>7} {row['lines']:>7}" for folder, row in rows))
    print(f"\n{figs['modules']} modules (packages' __init__ included), {figs['edges']} edges")
    print(f"{len(figs['circles'])} import circle(s)")
    for i, circle in enumerate(figs["circles"], 1):
        print(f"  {i}. {len(circle['modules'])} modules: {', '.join(circle['modules'])}")
        print("".join(f"       {s} -> {d} ({', '.join(names)})\n" for s, d, names in circle["edges"]), end="")
    chain = figs["chain"]
    steps = [c[0] if len(c) == 1 else "{" + ", ".join(c) + "}" for c in chain["path"]]
    print(f"longest import chain from {chain['start']} (defines plan_request): {chain['modules']} modules")
    print("  " + "\n  -> ".join(steps) if steps else "  (no module defines plan_request)")
    print("".join(f"problem: {problem}\n" for problem in figs["problems"]), end="")
    trace = figs.get("trace", {})
    if "events" in trace:
        print(f"\nplan_request({Path(trace['request']).name}): {trace['events']} calls and returns in "
              f"{trace['modules']} modules, {trace['stays']} stays, {trace['returns']} returns")  # fmt: skip
        print(f"  {'folder':<{width}} {'modules':>7} {'stays':>7} {'returns':>7}")
        for folder, row in trace["folders"].items():
            print(f"  {folder:<{width}} {row['modules']:>7} {row['stays']:>7} {row['returns']:>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this tool's)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--trace-plan", action="store_true", help="also trace plan_request on an example")
    parser.add_argument("--request", type=Path, help="the request --trace-plan plans (default: an example)")
    args = parser.parse_args(argv)
    graph = Graph(args.root.resolve())
    figs = report(graph)
    trace = trace_plan(graph, args.request) if args.trace_plan else {}
    figs["trace"] = {"error": trace} if isinstance(trace, str) else trace
    show(figs)
    if args.json:
        args.json.write_text(json.dumps(figs, indent=1) + "\n")
    if isinstance(trace, str):
        print(f"--trace-plan: {trace}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
