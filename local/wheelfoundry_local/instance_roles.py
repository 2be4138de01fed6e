"""An instance's (or a CodeBuild build's) role, as the local runner holds it (the embedded S3 enforces it).

On EC2 the SSM agent's commands run with the instance profile's role. Here one machine plays every
instance, so the agent asks the emulator which profile the instance was launched with (RunInstances'
``IamInstanceProfile``, else its launch template's; moto does not copy the latter onto the instance)
and gives the command a session of that role, named after the instance as EC2 names it. Requests the
runner signs with it are authorized by ``iam_enforce.py`` against the role as deployed. The local
CodeBuild does the same with the build's service role (StartBuild's ``serviceRoleOverride``, else the
project's), as CodeBuild hands a build its service role's credentials.
"""

from __future__ import annotations

from typing import Any


def instance_role_arn(ec2: Any, iam: Any, instance_id: str) -> str | None:
    """The role of the instance's profile, or None when it was launched without one."""
    associations = ec2.describe_iam_instance_profile_associations(
        Filters=[{"Name": "instance-id", "Values": [instance_id]}]
    )["IamInstanceProfileAssociations"]
    profile_arn = associations[0]["IamInstanceProfile"]["Arn"] if associations else None
    if profile_arn is None:
        (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        tags = {t["Key"]: t["Value"] for t in reservation["Instances"][0].get("Tags", [])}
        template = tags.get("aws:ec2launchtemplate:id")
        if template is None:
            return None
        (version,) = ec2.describe_launch_template_versions(
            LaunchTemplateId=template, Versions=[tags.get("aws:ec2launchtemplate:version", "$Default")]
        )["LaunchTemplateVersions"]
        profile_arn = version["LaunchTemplateData"].get("IamInstanceProfile", {}).get("Arn")
        if profile_arn is None:
            return None
    name = profile_arn.rsplit("/", 1)[-1]
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    return str(roles[0]["Arn"]) if roles else None


def role_environment(sts: Any, role_arn: str, instance_id: str) -> dict[str, str]:
    """AWS_* variables holding a session of ``role_arn`` named after the instance."""
    creds = sts.assume_role(RoleArn=role_arn, RoleSessionName=instance_id)["Credentials"]
    return {
        "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
        "AWS_SESSION_TOKEN": creds["SessionToken"],
    }


def service_role_environment(iam: Any, sts: Any, role: str, session_name: str) -> dict[str, str]:
    """AWS_* variables holding a session of a CodeBuild service role given by ARN or name.

    Raises LookupError when the role does not exist: CodeBuild then cannot start the build either.
    """
    name = role.rsplit("/", 1)[-1]
    try:
        arn = str(iam.get_role(RoleName=name)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException as exc:
        raise LookupError(f"CodeBuild cannot assume the service role {role!r}: no such role") from exc
    return role_environment(sts, arn, session_name)
