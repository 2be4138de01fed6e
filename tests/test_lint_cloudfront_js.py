"""tools/lint_cloudfront_js.py (issue 65 item 7): the template's CloudFront Functions keep to what the
cloudfront-js-2.0 runtime documents, and each documented rule catches code that breaks it (QuickJS, which
the local edge runs, accepts all of these)."""

from __future__ import annotations

import pytest

from tests.helpers import template
from tools.lint_cloudfront_js import MAX_BYTES, check, functions, main

OK = "function handler(event) {\n  return event.request;\n}\n"


def test_the_templates_functions_keep_to_the_runtime() -> None:
    found = functions(template())
    assert set(found) == {"EdgeIndexFunction"}
    assert [p for name, (code, runtime) in found.items() for p in check(name, code, runtime)] == []
    assert main(["template.yaml"]) == 0


@pytest.mark.parametrize(
    ("code", "runtime", "breach"),
    [
        (OK, "cloudfront-js-1.0", "FunctionConfig.Runtime is 'cloudfront-js-1.0'"),
        (OK + "//" + "x" * MAX_BYTES, "cloudfront-js-2.0", "a CloudFront function may have 10240 at most"),
        ("function main(event) { return event.request; }", "cloudfront-js-2.0", "no top-level 'function handler"),
        ("function handler() { return 1; }", "cloudfront-js-2.0", "no top-level 'function handler"),
        ("var fs = require('fs');\n" + OK, "cloudfront-js-2.0", ":1: require('fs'); 2.0 allows only buffer"),
        ("var m = require(name);\n" + OK, "cloudfront-js-2.0", "require without a literal module name"),
        ("import x from 'kvs';\n" + OK, "cloudfront-js-2.0", "import of 'kvs'; 2.0 imports only 'cloudfront'"),
        (OK + "eval('1');\n", "cloudfront-js-2.0", ":4: eval: dynamic code evaluation"),
        (OK + "var f = new Function('a', 'return a');\n", "cloudfront-js-2.0", "Function: dynamic code evaluation"),
        (OK + "setTimeout(handler, 1);\n", "cloudfront-js-2.0", "setTimeout: timers"),
        (OK + "fetch('https://x');\n", "cloudfront-js-2.0", "fetch: network access"),
        (OK + "var b = 'x'.toUTF8();\n", "cloudfront-js-2.0", ".toUTF8(): a 1.0 string method that 2.0 removed"),
    ],
)
def test_each_documented_rule_catches_its_breach(code: str, runtime: str, breach: str) -> None:
    problems = check("F", code, runtime)
    assert any(breach in p for p in problems), problems


def test_names_in_strings_comments_and_properties_are_no_breach() -> None:
    code = (
        "var crypto = require('crypto');\nimport cf from 'cloudfront';\n"
        "// eval and setTimeout are not used here\nvar s = 'fetch(x) and process';\n"
        "var t = `Function ${1}`;\nvar o = {process: 1};\nvar p = o.process;\n"
        "async function handler(event) {\n  return event.request;\n}\n"
    )
    assert check("F", code) == []
