"""What keeps a deploy of the embedded AWS cheap (wheelfoundry_local.moto_pace), held to what it promises:
a redeployed stack names its functions and documents as before, so its state machine's definition is the
same text and its syntax tree is reused; names moto keeps random stay random; the images the farm launches
from are there, moto's list of ECS-optimized ones is not."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from wheelfoundry_local import EmbeddedAws, moto_pace
from wheelfoundry_user.farm import Farm

ROOT = Path(__file__).resolve().parents[2]


def _definition(aws: EmbeddedAws, arn: str) -> str:
    return str(aws.client("stepfunctions").describe_state_machine(stateMachineArn=arn)["definition"])


def test_a_redeployed_stack_names_its_functions_as_before_and_its_definition_is_parsed_once(aws: EmbeddedAws) -> None:
    first = aws.deploy(ROOT / "template.yaml")
    (arn,) = first.of_type("AWS::StepFunctions::StateMachine").values()
    definition = _definition(aws, arn)
    assert definition in moto_pace._TREES, "the deploy's definition was parsed and kept"
    trees = len(moto_pace._TREES)
    aws.reset()  # an empty account, as the next test in this process gets
    second = aws.deploy(ROOT / "template.yaml")
    for kind in moto_pace.STABLE_NAMES:
        named = first.of_type(kind)
        assert named and named == second.of_type(kind), kind
    (arn,) = second.of_type("AWS::StepFunctions::StateMachine").values()
    assert _definition(aws, arn) == definition
    assert len(moto_pace._TREES) == trees, "the second deploy parsed its definition again"
    # a stack's other generated names are still moto's random ones (a bucket may outlive its stack)
    buckets = first.of_type("AWS::S3::Bucket")
    assert buckets and all(first.resources[b] != second.resources[b] for b in buckets), buckets


DOCUMENTS = """AWSTemplateFormatVersion: "2010-09-09"
Resources:
  Kept:
    Type: AWS::SSM::Document
    DeletionPolicy: Retain
    Properties: {DocumentType: Command, Content: {schemaVersion: "2.2", mainSteps: []}}
  Gone:
    Type: AWS::SSM::Document
    Properties: {DocumentType: Command, Content: {schemaVersion: "2.2", mainSteps: []}}
"""


def test_a_retained_document_leaves_its_name_to_it_and_the_next_stack_of_that_name_gets_another(
    aws: EmbeddedAws, tmp_path: Path
) -> None:
    template = tmp_path / "documents.yaml"
    template.write_text(DOCUMENTS)
    first = aws.deploy(template, stack_name="docs")
    aws.client("cloudformation").delete_stack(StackName="docs")
    second = aws.deploy(template, stack_name="docs")  # the retained document still holds its name
    assert first.resources["Gone"] == second.resources["Gone"]
    assert first.resources["Kept"] != second.resources["Kept"]
    names = {
        d["Name"]
        for d in aws.client("ssm").list_documents(Filters=[{"Key": "Owner", "Values": ["Self"]}])["DocumentIdentifiers"]
    }
    assert {first.resources["Kept"], second.resources["Kept"], second.resources["Gone"]} <= names


def test_the_images_the_farm_launches_from_are_there_and_the_ecs_list_is_not(aws: EmbeddedAws) -> None:
    ssm, ec2 = aws.client("ssm"), aws.client("ec2")
    for arch in ("x86_64", "arm64"):
        name = f"/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-{arch}"
        image = ssm.get_parameter(Name=name)["Parameter"]["Value"]
        (found,) = ec2.describe_images(ImageIds=[image])["Images"]
        assert found["Architecture"] == arch
        (instance,) = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"]
        assert instance["Architecture"] == arch
        ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    amazon = ec2.describe_images(Owners=["amazon"])["Images"]
    assert 0 < len(amazon) < 200, f"{len(amazon)} images: moto's 1,100 ECS-optimized ones were loaded"


def test_a_farm_makes_its_clients_from_one_session(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []

    class Counted(boto3.session.Session):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(boto3.session, "Session", Counted)
    farm = Farm("wf", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    s3 = farm.client("s3")
    assert farm.client("stepfunctions") is not s3 and farm.client("s3") is s3
    assert len(made) == 1


def test_every_botocore_session_of_a_test_process_reads_its_data_through_one_loader() -> None:
    import botocore.session

    one, two = botocore.session.Session(), botocore.session.Session()
    loader = one.get_component("data_loader")
    assert loader is two.get_component("data_loader")  # tests/conftest.py
    boto3.session.Session()
    paths = list(loader.search_paths)
    boto3.session.Session(), boto3.session.Session()
    assert loader.search_paths == paths, "each boto3 session added its data folder again"
