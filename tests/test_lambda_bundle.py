"""The Lambda bundle: AWS's Powertools layer by its regional ARN, nothing the runtime or layer has,
the bundle's size within the goal (bench/lambda_bundle.py measures the real arm64 build), and what a
handler's cold import loads (bench/lambda_bundle.py times it; here only which modules, not how long)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from tests.helpers import ROOT, template
from tools.lock_lambda_requirements import LAYER_PROVIDED, RUNTIME_PROVIDED, canonical, closure, parse_lock

BUNDLE_GOAL_BYTES = 5_000_000


def _requirements() -> list[Requirement]:
    locked = parse_lock((ROOT / "functions/requirements.txt").read_text())
    return [Requirement(f"{name}=={version}") for name, (version, _) in locked.items()]


def test_functions_use_the_powertools_layer_of_their_region_runtime_and_architecture() -> None:
    fn = template()["Globals"]["Function"]
    (layer,) = fn["Layers"]
    arn = layer["Fn::Sub"]
    python = fn["Runtime"].replace(".", "")  # python3.12 -> python312
    (arch,) = fn["Architectures"]
    assert arn.startswith("arn:aws:lambda:${AWS::Region}:017000801446:layer:"), arn
    assert re.fullmatch(rf".*:layer:AWSLambdaPowertoolsPythonV3-{python}-{arch}:\$\{{PowertoolsLayerVersion\}}", arn)
    assert template()["Parameters"]["PowertoolsLayerVersion"]["Type"] == "Number"


def test_lambda_requirements_leave_out_what_the_runtime_and_the_layer_provide() -> None:
    names = {canonical(r.name) for r in _requirements()}
    assert names, "functions/requirements.txt lists nothing"
    assert not names & RUNTIME_PROVIDED, names & RUNTIME_PROVIDED
    assert not names & LAYER_PROVIDED, names & LAYER_PROVIDED
    # no extras (e.g. powertools[tracer] would pull botocore)
    assert not [ln for ln in (ROOT / "functions/requirements.txt").read_text().splitlines() if "[" in ln.split("#")[0]]


def test_bundle_stays_within_the_goal() -> None:
    """functions/ plus the installed files of every shipped distribution, zipped as sam package does."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((ROOT / "functions").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(ROOT / "functions").as_posix())
        for name in closure([r.name for r in _requirements()]):
            dist = metadata.distribution(name)
            for file in dist.files or []:
                located = Path(str(dist.locate_file(file)))
                if located.is_file() and "__pycache__" not in file.parts:
                    archive.write(located, f"{name}/{file}")
    size = len(buffer.getvalue())
    assert size <= BUNDLE_GOAL_BYTES, f"the Lambda bundle is {size / 1e6:.2f} MB zipped (goal 5 MB)"


# Loaded at a function's init, they cost more than the handler's own work: aws_xray_sdk (Powertools'
# Tracer, ~200 ms; Lambda's active tracing records the invocations) and the planner with jsonschema
# (~170 ms, only Validate needs them, at its call). handlers/runtime.py says why.
NOT_AT_INIT = ("aws_xray_sdk", "jsonschema", "wheelfoundry.planning.planning", "wheelfoundry.catalog.catalog")


def _modules_after_import(handlers: list[str], extra_env: dict[str, str]) -> set[str]:
    """sys.modules after importing these modules in a fresh interpreter, as Lambda's init does."""
    code = "import json, sys\n" + "".join(f"import {m}\n" for m in handlers) + "print(json.dumps(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if k != "WF_TRACE_AWS_CALLS"}
    env.update({"PYTHONPATH": str(ROOT / "functions"), "AWS_LAMBDA_FUNCTION_NAME": "test", **extra_env})
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    return set(json.loads(out))


def _functions() -> list[dict[str, Any]]:
    found = [r for r in template()["Resources"].values() if r["Type"] == "AWS::Serverless::Function"]
    return [r for r in found if r["Properties"].get("Handler", "").startswith("wheelfoundry.handlers.")]


def test_handler_modules_leave_the_tracer_and_the_planner_out_of_the_cold_import() -> None:
    handlers = sorted({fn["Properties"]["Handler"].rsplit(".", 1)[0] for fn in _functions()})
    assert len(handlers) >= 10  # every handler of the state machine, not an empty list
    loaded = _modules_after_import(handlers, {})
    assert "wheelfoundry.handlers.validate" in loaded and "aws_lambda_powertools" in loaded
    assert not [m for m in NOT_AT_INIT if m in loaded]
    # The opt-in keeps working: with WF_TRACE_AWS_CALLS the Tracer (and X-Ray SDK) are back.
    assert "aws_xray_sdk" in _modules_after_import(["wheelfoundry.handlers.runtime"], {"WF_TRACE_AWS_CALLS": "true"})


# Layer version -> the Powertools release it carries (issue 7689 of aws-powertools/powertools-lambda-python:
# layer 27 was created with 3.23.0). Extend when the default moves.
LAYER_POWERTOOLS = {27: "3.23.0"}


def test_tests_run_the_powertools_that_the_default_layer_carries() -> None:
    default = template()["Parameters"]["PowertoolsLayerVersion"]["Default"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    (pin,) = re.findall(r'"aws-lambda-powertools==([^"]+)"', pyproject)
    assert LAYER_POWERTOOLS[int(default)] == pin, (default, pin)
    assert metadata.version("aws-lambda-powertools") == pin
