"""The Lambda bundle: AWS's Powertools layer by its regional ARN, nothing the runtime or layer has,
and the bundle's size within the goal (bench/lambda_bundle.py measures the real arm64 build)."""

from __future__ import annotations

import io
import re
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from tests.helpers import ROOT, template

BUNDLE_GOAL_BYTES = 5_000_000
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil", "six"}
LAYER_PROVIDED = {"aws-lambda-powertools", "aws-xray-sdk", "wrapt"}


def _requirements() -> list[Requirement]:
    lines = (ROOT / "functions/requirements.txt").read_text().splitlines()
    return [Requirement(ln) for ln in lines if ln.strip() and not ln.startswith("#")]


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
    names = {re.sub(r"[-_.]+", "-", r.name).lower() for r in _requirements()}
    assert names, "functions/requirements.txt lists nothing"
    assert not names & RUNTIME_PROVIDED, names & RUNTIME_PROVIDED
    assert not names & LAYER_PROVIDED, names & LAYER_PROVIDED
    assert all(r.extras == set() for r in _requirements())  # e.g. powertools[tracer] would pull botocore


def _closure(requirements: list[Requirement]) -> set[str]:
    """The installed distributions pip would put in the bundle for these requirements."""
    seen: set[str] = set()
    todo = [r.name for r in requirements]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen or name in RUNTIME_PROVIDED | LAYER_PROVIDED:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_bundle_stays_within_the_goal() -> None:
    """functions/ plus the installed files of every shipped distribution, zipped as sam package does."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((ROOT / "functions").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(ROOT / "functions").as_posix())
        for name in sorted(_closure(_requirements())):
            dist = metadata.distribution(name)
            for file in dist.files or []:
                located = Path(str(dist.locate_file(file)))
                if located.is_file() and "__pycache__" not in file.parts:
                    archive.write(located, f"{name}/{file}")
    size = len(buffer.getvalue())
    assert size <= BUNDLE_GOAL_BYTES, f"the Lambda bundle is {size / 1e6:.2f} MB zipped (goal 5 MB)"
