"""Check each CloudFront Function in template.yaml against the cloudfront-js-2.0 runtime's documented rules.

``python tools/lint_cloudfront_js.py [template.yaml]`` (a step of ``make lint``) prints one line per breach
and exits 1. The local edge runs the code in QuickJS, which accepts far more than CloudFront does (timers,
eval, any module, a function of any size), so a function can pass every local test and fail to publish or
fail at the edge. Each rule below names the AWS CloudFront Developer Guide page it comes from:

- "Quotas on CloudFront Functions": a function's code is at most 10 KB.
- "Write function code" / "Event structure": CloudFront calls a top-level ``handler(event)``; 2.0 allows it
  ``async`` ("Use async and await").
- "JavaScript runtime 2.0 features for CloudFront Functions", Supported modules: ``require`` of ``buffer``,
  ``querystring`` and ``crypto`` only, and ``import cf from 'cloudfront'`` (the helper methods module).
- Same page and "Restrictions on CloudFront Functions", Restricted features: no dynamic code evaluation
  (``eval``, the ``Function`` constructor), no timers (``setTimeout`` and the rest), no network or file
  system access (so no ``fetch``, ``XMLHttpRequest``, ``process``).
- "JavaScript runtime features for CloudFront Functions": 2.0 drops 1.0's non-standard string methods
  (``bytesFrom``, ``fromBytes``, ``fromUTF8``, ``toBytes``, ``toUTF8``).
- The function's ``FunctionConfig.Runtime`` is ``cloudfront-js-2.0``: the rules above are that runtime's.

Strings, template literals and comments are blanked before the checks, so a name in a string is no breach.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

RUNTIME = "cloudfront-js-2.0"
MAX_BYTES = 10 * 1024
MODULES = ("buffer", "querystring", "crypto")
FORBIDDEN = {
    "eval": "dynamic code evaluation",
    "Function": "dynamic code evaluation (the Function constructor)",
    "setTimeout": "timers",
    "setInterval": "timers",
    "setImmediate": "timers",
    "clearTimeout": "timers",
    "clearInterval": "timers",
    "clearImmediate": "timers",
    "fetch": "network access",
    "XMLHttpRequest": "network access",
    "process": "no process or file system",
}
GONE_IN_2 = ("bytesFrom", "fromBytes", "fromUTF8", "toBytes", "toUTF8")
_LITERAL = re.compile(r"//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|`(?:\\.|[^`\\])*`", re.S)


def _blank(code: str) -> str:
    """The code with comments and string bodies replaced by spaces (quotes kept, line numbers kept)."""

    def keep(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("/"):
            return re.sub(r"[^\n]", " ", text)
        return text[0] + re.sub(r"[^\n]", " ", text[1:-1]) + text[-1]

    return _LITERAL.sub(keep, code)


def _line(code: str, at: int) -> int:
    return code.count("\n", 0, at) + 1


def check(name: str, code: str, runtime: str | None = RUNTIME) -> list[str]:
    """Every breach of the documented 2.0 rules in one function's code, as ``<name>:<line>: <why>``."""
    problems = []
    if runtime != RUNTIME:
        problems.append(f"{name}: FunctionConfig.Runtime is {runtime!r}; the rules checked here are {RUNTIME!r}'s")
    size = len(code.encode("utf-8"))
    if size > MAX_BYTES:
        problems.append(f"{name}: the code is {size} bytes; a CloudFront function may have {MAX_BYTES} at most")
    bare = _blank(code)
    if not re.search(r"^(?:async\s+)?function\s+handler\s*\(\s*[A-Za-z_$][\w$]*\s*\)", bare, re.M):
        problems.append(f"{name}: no top-level 'function handler(event)', which CloudFront calls")
    for m in re.finditer(r"\brequire\s*\(\s*(['\"])([^'\"]*)\1\s*\)|\brequire\b", code):
        if bare[m.start()] == " ":  # inside a string or comment
            continue
        module = m.group(2)
        if module not in MODULES:
            what = f"require({module!r})" if module is not None else "require without a literal module name"
            problems.append(f"{name}:{_line(code, m.start())}: {what}; 2.0 allows only {', '.join(MODULES)}")
    for m in re.finditer(r"^\s*import\b[^;\n]*?from\s*(['\"])([^'\"]*)\1|^\s*import\b", code, re.M):
        if m.group(2) != "cloudfront":
            problems.append(f"{name}:{_line(code, m.start())}: import of {m.group(2)!r}; 2.0 imports only 'cloudfront'")
    for ident, why in FORBIDDEN.items():  # a property (o.process) or an object key ({process: 1}) is no use
        for m in re.finditer(rf"(?<![\w$.]){re.escape(ident)}(?![\w$]|\s*:)", bare):
            problems.append(f"{name}:{_line(code, m.start())}: {ident}: {why} is not available in {RUNTIME}")
    for method in GONE_IN_2:
        for m in re.finditer(rf"\.\s*{method}\s*\(", bare):
            problems.append(f"{name}:{_line(code, m.start())}: .{method}(): a 1.0 string method that 2.0 removed")
    return problems


def functions(template: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Every AWS::CloudFront::Function of the template: its code and runtime."""
    out = {}
    for name, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") == "AWS::CloudFront::Function":
            props = resource.get("Properties") or {}
            out[name] = (str(props.get("FunctionCode") or ""), (props.get("FunctionConfig") or {}).get("Runtime"))
    return out


def main(argv: list[str] | None = None) -> int:
    from samtranslator.yaml_helper import yaml_parse  # the template's own tags (!Sub, !If ...)

    path = Path((argv or sys.argv[1:] or ["template.yaml"])[0])
    found = functions(yaml_parse(path.read_text()))
    problems = [p for name, (code, runtime) in sorted(found.items()) for p in check(name, code, runtime)]
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    if not found:
        print(f"{path}: no AWS::CloudFront::Function to check", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
