"""Issue 31: what the Upload function's role may do, from template.yaml, evaluated offline (iam_policy.decide)
with the publish parameters given and left empty. The named secret and nothing else; CodeArtifact's three
calls on the one domain and repository deployed, and a bearer token for CodeArtifact only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_iam_matrix import ATTRIBUTES, PSEUDO, _Loader, _Tag
from wheelfoundry_local.iam_policy import Request, decide

ROOT = Path(__file__).resolve().parents[1]
SECRET = "arn:aws:secretsmanager:us-east-1:111122223333:secret:wf/pypi-token-AbCdEf"
OTHER_SECRET = "arn:aws:secretsmanager:us-east-1:111122223333:secret:db/password-XyZ123"
KEY = "arn:aws:kms:us-east-1:111122223333:key/provenance"
CA = "arn:aws:codeartifact:us-east-1:111122223333"
GIVEN = {
    "PublishTokenSecretArn": SECRET,
    "PublishCodeArtifactDomain": "my-domain",
    "PublishCodeArtifactRepository": "my-repo",
    "PublishCodeArtifactOwner": "",
}
EMPTY = dict.fromkeys(GIVEN, "")


def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load((ROOT / "template.yaml").read_text(), Loader=_Loader)
    return loaded


def _condition(name: str, params: dict[str, str], conditions: dict[str, Any]) -> bool:
    return bool(_eval(conditions[name], params, conditions))


def _eval(value: Any, params: dict[str, str], conditions: dict[str, Any]) -> Any:
    """Intrinsics as CloudFormation resolves them for these parameters (the subset the role uses)."""
    if isinstance(value, _Tag):
        tag, arg = value.tag, value.value
        if tag == "Ref":
            return params.get(arg, PSEUDO.get(arg, arg))
        if tag == "GetAtt":
            name = arg if isinstance(arg, str) else ".".join(arg)
            return KEY if name == "ProvenanceKey.Arn" else ATTRIBUTES.get(name, name)
        if tag == "Sub":
            text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], _eval(arg[1], params, conditions))
            names = {**PSEUDO, **params, **extra, "WheelBucket.Arn": ATTRIBUTES["WheelBucket.Arn"]}
            return re.sub(r"\$\{([A-Za-z0-9:.]+)\}", lambda m: str(names[m.group(1)]), text)
        if tag == "If":
            branch = arg[1] if _condition(arg[0], params, conditions) else arg[2]
            return _eval(branch, params, conditions)
        if tag == "Equals":
            return _eval(arg[0], params, conditions) == _eval(arg[1], params, conditions)
        if tag == "Not":
            return not _eval(arg[0], params, conditions)
        if tag == "And":
            return all(_eval(a, params, conditions) for a in arg)
        if tag == "Condition":
            return _condition(arg, params, conditions)
        raise NotImplementedError(tag)
    if isinstance(value, dict):
        out = {k: _eval(v, params, conditions) for k, v in value.items()}
        return {k: v for k, v in out.items() if v != "AWS::NoValue"}
    if isinstance(value, list):
        return [v for v in (_eval(v, params, conditions) for v in value) if v != "AWS::NoValue"]
    return value


def upload_role(params: dict[str, str]) -> list[dict[str, Any]]:
    tpl = template()
    role = tpl["Resources"]["UploadFunctionRole"]["Properties"]
    return [_eval(p["PolicyDocument"], params, tpl["Conditions"]) for p in role["Policies"]]


def allowed(params: dict[str, str], action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    return decide(Request(action, resource, context or {}), upload_role(params), []) == "Allow"


def test_the_upload_role_reads_only_the_named_secret() -> None:
    assert allowed(GIVEN, "secretsmanager:GetSecretValue", SECRET)
    assert not allowed(GIVEN, "secretsmanager:GetSecretValue", OTHER_SECRET)
    assert not allowed(GIVEN, "secretsmanager:ListSecrets", "*")
    assert not allowed(GIVEN, "secretsmanager:PutSecretValue", SECRET)
    # Deployed without a secret: no Secrets Manager statement at all (not one on "*" or on "").
    assert not any("secretsmanager" in str(p) for p in upload_role(EMPTY))


@pytest.mark.parametrize(
    ("action", "resource", "expected"),
    [
        ("codeartifact:GetAuthorizationToken", f"{CA}:domain/my-domain", True),
        ("codeartifact:GetAuthorizationToken", f"{CA}:domain/another-domain", False),
        ("codeartifact:GetRepositoryEndpoint", f"{CA}:repository/my-domain/my-repo", True),
        ("codeartifact:ReadFromRepository", f"{CA}:repository/my-domain/my-repo", True),
        ("codeartifact:ReadFromRepository", f"{CA}:repository/my-domain/other-repo", False),
        ("codeartifact:PublishPackageVersion", f"{CA}:package/my-domain/my-repo/pypi//wf-example-ops", True),
        ("codeartifact:PublishPackageVersion", f"{CA}:package/my-domain/other-repo/pypi//wf-example-ops", False),
        ("codeartifact:PublishPackageVersion", f"{CA}:package/my-domain/my-repo/npm//left-pad", False),
        ("codeartifact:DeletePackageVersions", f"{CA}:package/my-domain/my-repo/pypi//wf-example-ops", False),
        ("kms:Verify", KEY, True),
        ("kms:Sign", KEY, False),
        ("s3:GetObject", "arn:aws:s3:::wf-wheels/wheels/demo/x/x-1.0-py3-none-any.whl", True),
        ("s3:PutObject", "arn:aws:s3:::wf-wheels/wheels/demo/x/x-1.0-py3-none-any.whl", False),
        ("s3:PutObject", "arn:aws:s3:::wf-wheels/runs/r1/upload.json", True),
    ],
)
def test_the_upload_role_with_codeartifact(action: str, resource: str, expected: bool) -> None:
    assert allowed(GIVEN, action, resource) is expected


def test_a_bearer_token_for_codeartifact_only_and_nothing_without_a_domain() -> None:
    codeartifact = {"sts:AWSServiceName": "codeartifact.amazonaws.com"}
    assert allowed(GIVEN, "sts:GetServiceBearerToken", "*", codeartifact)
    assert not allowed(GIVEN, "sts:GetServiceBearerToken", "*", {"sts:AWSServiceName": "other.amazonaws.com"})
    assert not any("codeartifact" in str(p) for p in upload_role(EMPTY))
    owner = {**GIVEN, "PublishCodeArtifactOwner": "444455556666"}
    assert allowed(
        owner, "codeartifact:GetAuthorizationToken", "arn:aws:codeartifact:us-east-1:444455556666:domain/my-domain"
    )
    assert not allowed(owner, "codeartifact:GetAuthorizationToken", f"{CA}:domain/my-domain")


def test_no_other_role_of_the_template_touches_secrets_and_the_secret_policy_denies_the_rest() -> None:
    tpl = template()
    holders = [name for name, res in tpl["Resources"].items() if "secretsmanager:" in str(_plain(res))]
    assert sorted(holders) == ["PublishTokenSecretPolicy", "UploadFunctionRole"]
    policy = tpl["Resources"]["PublishTokenSecretPolicy"]
    assert policy["Condition"] == "HasPublishSecret"
    (deny,) = policy["Properties"]["ResourcePolicy"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "secretsmanager:GetSecretValue"
    assert _plain(deny["Condition"]) == {"ArnNotEquals": {"aws:PrincipalArn": "GetAtt:UploadFunctionRole.Arn"}}


def _plain(value: Any) -> Any:
    if isinstance(value, _Tag):
        return f"{value.tag}:{value.value}" if isinstance(value.value, str) else _plain(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
