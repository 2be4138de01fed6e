"""Issue 10 item 2: what each build role of template.yaml may do, evaluated offline (tests/test_iam_eval.py)
as a roles x (action, resource) matrix. The test prints the table and checks that docs/security.md holds
it; `python -m tests.test_iam_matrix` rewrites that section."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from wfbuild.runner.credentials import session_policy
from wheelfoundry_local.iam_policy import Policy, Request, decide

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"
START, END = "<!-- iam-matrix:start -->", "<!-- iam-matrix:end -->"
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "111122223333", "AWS::StackName": "wf"}
BUCKET = "arn:aws:s3:::wf-wheels"
REPO = "arn:aws:ecr:us-east-1:111122223333:repository/wf-builder"
FRAMEWORK_JOB_ROLE = "arn:aws:iam::111122223333:role/wf-FrameworkJobRole-1"
EXTENSION_JOB_ROLE = "arn:aws:iam::111122223333:role/wf-ExtensionJobRole-1"
ATTRIBUTES = {
    "WheelBucket.Arn": BUCKET,
    "BuilderRepository.Arn": REPO,
    "FrameworkJobRole.Arn": FRAMEWORK_JOB_ROLE,
    "ExtensionJobRole.Arn": EXTENSION_JOB_ROLE,
}


class _Tag:
    def __init__(self, tag: str, value: Any) -> None:
        self.tag, self.value = tag, value


class _Loader(yaml.SafeLoader):
    pass


def _construct(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> _Tag:
    if isinstance(node, yaml.ScalarNode):
        return _Tag(suffix, loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return _Tag(suffix, loader.construct_sequence(node, deep=True))
    return _Tag(suffix, loader.construct_mapping(node, deep=True))  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _construct)
_NO_VALUE = object()
_SUB = re.compile(r"\$\{([A-Za-z0-9:.]+)\}")


def _attribute(name: str) -> str:
    if name in ATTRIBUTES:
        return ATTRIBUTES[name]
    logical, _, attr = name.partition(".")
    return (
        f"arn:aws:logs:us-east-1:111122223333:log-group:{logical}"
        if logical.endswith("LogGroup")
        else f"{logical}.{attr}"
    )


def resolve(value: Any) -> Any:
    """Intrinsics as a deployed stack would have them (every condition false: no VPC, no alarm topic)."""
    if isinstance(value, _Tag):
        if value.tag == "Sub":
            text = value.value if isinstance(value.value, str) else value.value[0]
            return _SUB.sub(lambda m: PSEUDO.get(m.group(1)) or _attribute(m.group(1)), text)
        if value.tag == "GetAtt":
            return _attribute(value.value if isinstance(value.value, str) else ".".join(value.value))
        if value.tag == "Ref":
            return _NO_VALUE if value.value == "AWS::NoValue" else PSEUDO.get(value.value, value.value)
        if value.tag == "If":
            return resolve(value.value[2])
        raise NotImplementedError(value.tag)
    if isinstance(value, dict):
        return {k: v for k, v in ((k, resolve(v)) for k, v in value.items()) if v is not _NO_VALUE}
    if isinstance(value, list):
        return [v for v in (resolve(v) for v in value) if v is not _NO_VALUE]
    return value


def role_policies(logical_id: str) -> list[Policy]:
    template = yaml.load((ROOT / "template.yaml").read_text(), Loader=_Loader)
    role = template["Resources"][logical_id]
    assert role["Type"] == "AWS::IAM::Role"
    return [resolve(p["PolicyDocument"]) for p in role["Properties"].get("Policies", [])]


OWN = "runs/run-a/jobs/job-a/"
ROWS: list[tuple[str, str, str]] = [
    ("write own job's wheel", "s3:PutObject", f"{BUCKET}/{OWN}wheels/x-1.0-py3-none-any.whl"),
    ("write own job's manifest", "s3:PutObject", f"{BUCKET}/{OWN}manifest.json"),
    ("write another job's wheel (same run)", "s3:PutObject", f"{BUCKET}/runs/run-a/jobs/job-b/wheels/x.whl"),
    ("write another run's wheel", "s3:PutObject", f"{BUCKET}/runs/run-b/jobs/job-c/wheels/x.whl"),
    ("read own job.json", "s3:GetObject", f"{BUCKET}/{OWN}job.json"),
    ("rewrite own job.json", "s3:PutObject", f"{BUCKET}/{OWN}job.json"),
    ("read another job's job.json", "s3:GetObject", f"{BUCKET}/runs/run-a/jobs/job-b/job.json"),
    ("read another job's task token (CodeBuild)", "s3:GetObject", f"{BUCKET}/runs/run-a/jobs/job-b/token"),
    (
        "publish into a channel",
        "s3:PutObject",
        f"{BUCKET}/wheels/release/torch/torch-2.5.1-cp311-cp311-linux_x86_64.whl",
    ),
    ("write the index", "s3:PutObject", f"{BUCKET}/simple/release/index.html"),
    ("write the framework cache", "s3:PutObject", f"{BUCKET}/sccache/cuda12.4-x86_64/k"),
    ("read the framework cache", "s3:GetObject", f"{BUCKET}/sccache/cuda12.4-x86_64/k"),
    ("write the extension cache", "s3:PutObject", f"{BUCKET}/sccache/ext-cpu-x86_64/k"),
    ("read the extension cache", "s3:GetObject", f"{BUCKET}/sccache/ext-cpu-x86_64/k"),
    ("push a builder image", "ecr:PutImage", REPO),
    ("pull a builder image", "ecr:BatchGetImage", REPO),
    (
        "complete another execution's task",
        "states:SendTaskSuccess",
        "arn:aws:states:us-east-1:111122223333:stateMachine:wf-build",
    ),
    ("assume the framework job role", "sts:AssumeRole", FRAMEWORK_JOB_ROLE),
    ("assume the extension job role", "sts:AssumeRole", EXTENSION_JOB_ROLE),
]
# column, role, the cache prefix of the per-job session the runner mints (None: the role as it is)
ROLES: list[tuple[str, str, str | None]] = [
    ("framework EC2", "BuildInstanceRole", None),
    ("framework CodeBuild", "CodeBuildRole", None),
    ("extension EC2", "ExtensionBuildInstanceRole", None),
    ("extension CodeBuild", "CodeBuildExtensionRole", None),
    ("framework job session", "FrameworkJobRole", "sccache/cuda12.4-x86_64/"),
    ("extension job session", "ExtensionJobRole", "sccache/ext-cpu-x86_64/"),
]
Y, N = True, False
EXPECTED = {  # one value per column of ROLES
    "write own job's wheel": (Y, Y, Y, Y, N, N),
    "write own job's manifest": (Y, Y, Y, Y, N, N),
    "write another job's wheel (same run)": (Y, Y, Y, Y, N, N),
    "write another run's wheel": (Y, Y, Y, Y, N, N),
    "read own job.json": (Y, Y, Y, Y, Y, Y),
    "rewrite own job.json": (N, N, N, N, N, N),
    "read another job's job.json": (Y, Y, Y, Y, N, N),
    "read another job's task token (CodeBuild)": (N, Y, N, Y, N, N),
    "publish into a channel": (N, N, N, N, N, N),
    "write the index": (N, N, N, N, N, N),
    "write the framework cache": (Y, Y, N, N, Y, N),
    "read the framework cache": (Y, Y, N, N, Y, N),
    "write the extension cache": (Y, Y, Y, Y, N, Y),
    "read the extension cache": (N, N, Y, Y, N, Y),
    "push a builder image": (Y, Y, N, N, N, N),
    "pull a builder image": (Y, Y, Y, Y, N, N),
    "complete another execution's task": (Y, Y, Y, Y, N, N),
    "assume the framework job role": (Y, Y, N, N, N, N),
    "assume the extension job role": (N, N, Y, Y, N, N),
}


def matrix() -> dict[str, tuple[str, ...]]:
    policies = {role: role_policies(role) for _, role, _ in ROLES}
    out = {}
    for label, action, resource in ROWS:
        request = Request(action, resource, {"aws:SecureTransport": "true"})
        cells = []
        for _, role, cache in ROLES:
            session = [] if cache is None else [session_policy("wf-wheels", OWN, cache, "us-east-1")]
            cells.append(decide(request, policies[role], session))
        out[label] = tuple(cells)
    return out


def table(result: dict[str, tuple[str, ...]]) -> str:
    short = {"Allow": "allow", "ExplicitDeny": "DENY (explicit)", "ImplicitDeny": "deny"}
    lines = ["| action on resource | " + " | ".join(c for c, _, _ in ROLES) + " |", "|---" * (len(ROLES) + 1) + "|"]
    for label, action, _ in ROWS:
        lines.append(f"| {label} (`{action}`) | " + " | ".join(short[c] for c in result[label]) + " |")
    return "\n".join(lines)


def test_role_matrix_is_as_intended(capsys: pytest.CaptureFixture[str]) -> None:
    result = matrix()
    with capsys.disabled():
        print("\n" + table(result))
    got = {label: tuple(c == "Allow" for c in cells) for label, cells in result.items()}
    assert got == EXPECTED


def test_extension_roles_deny_pushes_and_foreign_writes_explicitly() -> None:
    result = matrix()
    for label in ("push a builder image", "write the framework cache", "publish into a channel"):
        assert result[label][2] == result[label][3] == "ExplicitDeny", label


def test_docs_security_md_holds_the_current_matrix() -> None:
    text = DOC.read_text()
    assert START in text and END in text
    assert text.split(START, 1)[1].split(END, 1)[0].strip() == table(matrix()).strip(), (
        "run: .venv/bin/python -m tests.test_iam_matrix  (rewrites the table in docs/security.md)"
    )


def write_doc() -> None:
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    DOC.write_text(f"{head}{START}\n{table(matrix())}\n{END}{rest.split(END, 1)[1]}")


if __name__ == "__main__":
    write_doc()
    sys.exit(0)
