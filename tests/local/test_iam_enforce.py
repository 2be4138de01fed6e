"""Issue 10: the embedded S3 authorizes assumed-role sessions with the deployed template's roles, and the
runner's job session (buildspecs/wfbuild/runner/credentials.py) can touch nothing but its own job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from wfbuild.runner import credentials
from wheelfoundry_local.deploy import DeployedStack
from wheelfoundry_local.session import EmbeddedAws

ROOT = Path(__file__).resolve().parents[2]
OWN = "runs/r1/jobs/ext-cpu-x86_64/"
CACHE = "sccache/ext-cpu-x86_64/"


@pytest.fixture
def wf_stack(aws: EmbeddedAws) -> DeployedStack:
    return aws.deploy(ROOT / "template.yaml")  # the shipped template: its roles are what is enforced


def _role_arn(stack: DeployedStack, logical_id: str) -> str:
    return f"arn:aws:iam::123456789012:role/{stack.physical_id(logical_id)}"


def _session(aws: EmbeddedAws, role_arn: str, policy: dict[str, Any] | None = None) -> Any:
    sts = boto3.client("sts", endpoint_url=aws.endpoint, region_name=aws.region)
    kwargs = {"Policy": json.dumps(policy)} if policy else {}
    creds = sts.assume_role(RoleArn=role_arn, RoleSessionName="test", **kwargs)["Credentials"]
    return boto3.client(
        "s3",
        endpoint_url=aws.endpoint,
        region_name=aws.region,
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )


def _denied(call: Any, **kwargs: Any) -> str:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    assert info.value.response["Error"]["Code"] in ("AccessDenied", "403"), info.value.response
    return str(info.value)


def test_a_job_session_reaches_only_its_job_json_and_its_cache(aws: EmbeddedAws, wf_stack: DeployedStack) -> None:
    bucket = wf_stack.bucket()
    for key in (f"{OWN}job.json", f"{OWN}token", "runs/r1/jobs/other/job.json", "sccache/cpu-x86_64/k", f"{CACHE}k"):
        aws.client("s3").put_object(Bucket=bucket, Key=key, Body=b"x")
    policy = credentials.session_policy(bucket, OWN, CACHE, aws.region)
    s3 = _session(aws, _role_arn(wf_stack, "ExtensionJobRole"), policy)

    assert s3.get_object(Bucket=bucket, Key=f"{OWN}job.json")["Body"].read() == b"x"
    s3.put_object(Bucket=bucket, Key=f"{CACHE}new", Body=b"cache")
    s3.get_object(Bucket=bucket, Key=f"{CACHE}k")
    s3.list_objects_v2(Bucket=bucket, Prefix=CACHE)
    message = _denied(s3.put_object, Bucket=bucket, Key="sccache/cpu-x86_64/k", Body=b"poison")
    assert "s3:PutObject" in message
    _denied(s3.put_object, Bucket=bucket, Key="runs/r2/jobs/j/wheels/x-1-py3-none-any.whl", Body=b"w")
    _denied(s3.put_object, Bucket=bucket, Key=f"{OWN}wheels/x-1-py3-none-any.whl", Body=b"w")  # the runner's job
    _denied(s3.get_object, Bucket=bucket, Key="runs/r1/jobs/other/job.json")
    _denied(s3.get_object, Bucket=bucket, Key=f"{OWN}token")
    _denied(s3.list_objects_v2, Bucket=bucket, Prefix="runs/")
    _denied(s3.copy_object, Bucket=bucket, Key=f"{CACHE}stolen", CopySource={"Bucket": bucket, "Key": f"{OWN}token"})
    _denied(s3.delete_objects, Bucket=bucket, Delete={"Objects": [{"Key": f"{CACHE}k"}]})
    assert aws.client("s3").get_object(Bucket=bucket, Key="sccache/cpu-x86_64/k")["Body"].read() == b"x"
    denied = aws.server.iam.denied()
    assert {d.action for d in denied} >= {"s3:PutObject", "s3:GetObject", "s3:ListBucket", "s3:DeleteObject"}


def test_class_roles_are_enforced_as_deployed(aws: EmbeddedAws, wf_stack: DeployedStack) -> None:
    bucket = wf_stack.bucket()
    s3 = _session(aws, _role_arn(wf_stack, "ExtensionBuildInstanceRole"))
    s3.put_object(Bucket=bucket, Key=f"{OWN}wheels/x-1-py3-none-any.whl", Body=b"w")  # the runner uploads
    assert "explicit deny" in _denied(s3.put_object, Bucket=bucket, Key="sccache/cpu-x86_64/k", Body=b"p")
    _denied(s3.put_object, Bucket=bucket, Key=f"{OWN}job.json", Body=b"{}")
    framework = _session(aws, _role_arn(wf_stack, "FrameworkJobRole"), credentials.session_policy(bucket, OWN, ""))
    _denied(framework.get_object, Bucket=bucket, Key=f"{CACHE}k")  # no cache prefix in its session: none
    # The emulator's own credentials stay the administrator's.
    aws.client("s3").put_object(Bucket=bucket, Key="simple/index.html", Body=b"ok")
    # A role with a conditional statement (`!If [CodeBuildInVpc, ..., !Ref AWS::NoValue]`) is deployed
    # without it, as CloudFormation does, and is enforced like any other.
    from wheelfoundry_local.iam_enforce import role_policies

    policies = role_policies(_role_arn(wf_stack, "CodeBuildExtensionRole"))
    statements = [st for doc in policies for st in doc["Statement"]]
    assert statements and None not in statements
    assert "VpcNetworkInterfaces" not in {st.get("Sid") for st in statements}  # the stack is not in a VPC
    codebuild = _session(aws, _role_arn(wf_stack, "CodeBuildExtensionRole"))
    codebuild.put_object(Bucket=bucket, Key=f"{OWN}manifest.json", Body=b"{}")
    assert "explicit deny" in _denied(codebuild.put_object, Bucket=bucket, Key="sccache/cpu-x86_64/k", Body=b"p")


def test_job_credentials_mint_refresh_and_fail_closed(
    aws: EmbeddedAws, wf_stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = wf_stack.bucket()
    aws.client("s3").put_object(Bucket=bucket, Key=f"{OWN}job.json", Body=b"{}")
    sts = boto3.client("sts", endpoint_url=aws.endpoint, region_name=aws.region)
    notes: list[str] = []
    path = tmp_path / "aws" / "credentials"
    policy = credentials.session_policy(bucket, OWN, CACHE)
    creds = credentials.JobCredentials(
        sts, _role_arn(wf_stack, "ExtensionJobRole"), "ext/1", policy, path, notes.append
    )
    assert creds.mint() and oct(path.stat().st_mode & 0o777) == "0o600"
    first = path.read_text()
    assert creds.mint() and path.read_text() != first  # a refresh is a new session
    env = creds.stage_env({"AWS_ACCESS_KEY_ID": "host", "WF_TASK_TOKEN": "t", "PATH": "/bin"}, str(path))
    assert env == {
        "PATH": "/bin",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": str(path),
    }
    for name in credentials.SCRUBBED:  # what a stage process sees: only the file
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s3 = boto3.Session(region_name=aws.region).client("s3", endpoint_url=aws.endpoint)
    s3.get_object(Bucket=bucket, Key=f"{OWN}job.json")
    _denied(s3.put_object, Bucket=bucket, Key="sccache/cpu-x86_64/k", Body=b"p")

    broken = credentials.JobCredentials(sts, "", "j", policy, tmp_path / "none", notes.append)
    assert not broken.mint() and not broken.available
    assert broken.stage_env({}, "/x")["AWS_SHARED_CREDENTIALS_FILE"] == "/dev/null"
    assert credentials.session_name("a b/c" * 20) == ("wf-" + "a-b-c" * 20)[:64]
