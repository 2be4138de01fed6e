"""The offline IAM evaluator (wheelfoundry_local.iam_policy) against the examples of the IAM User Guide
(policy evaluation logic, policy variables, condition operators, session policies)."""

from __future__ import annotations

from wheelfoundry_local.iam_policy import Request, allowed, decide

# --- tests: examples of the IAM User Guide ---------------------------------------------------------
# reference_policies_evaluation-logic.html, reference_policies_variables.html,
# reference_policies_elements_condition_operators.html, access_policies.html#policies_session

MARKETING = {  # reference_policies_variables.html, "Introduction"
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket"],
            "Condition": {"StringLike": {"s3:prefix": ["marketing/*"]}},
        },
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket/marketing/*"],
        },
    ],
}
PER_USER = {  # reference_policies_variables.html, "Using variables in policies" (${aws:username})
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket"],
            "Condition": {"StringLike": {"s3:prefix": ["${aws:username}/*"]}},
        },
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket/${aws:username}/*"],
        },
    ],
}


def test_policy_variables_scope_each_user_to_their_prefix() -> None:
    david = {"aws:username": "David"}
    assert allowed(Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/David/notes.txt", david), [PER_USER])
    assert not allowed(Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/Mary/notes.txt", david), [PER_USER])
    list_own = Request("s3:ListBucket", "arn:aws:s3:::amzn-s3-demo-bucket", {**david, "s3:prefix": "David/"})
    assert allowed(list_own, [PER_USER])
    # No value for the variable (a role has no aws:username): the statement does not apply.
    assert not allowed(Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/David/x", {}), [PER_USER])


def test_wildcards_and_string_like_prefix_condition() -> None:
    assert allowed(Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/a/b.pdf"), [MARKETING])
    assert allowed(
        Request("S3:getobject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/x"), [MARKETING]
    )  # actions: any case
    assert not allowed(
        Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/Marketing/x"), [MARKETING]
    )  # ARNs: exact case
    assert not allowed(Request("s3:DeleteObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/x"), [MARKETING])
    bucket = "arn:aws:s3:::amzn-s3-demo-bucket"
    assert allowed(Request("s3:ListBucket", bucket, {"s3:prefix": "marketing/2024/"}), [MARKETING])
    assert not allowed(Request("s3:ListBucket", bucket, {"s3:prefix": "finance/"}), [MARKETING])
    assert not allowed(Request("s3:ListBucket", bucket, {}), [MARKETING])  # key absent: condition false


def test_explicit_deny_overrides_allow_and_default_is_deny() -> None:
    # reference_policies_evaluation-logic.html: "An explicit deny in any policy overrides any allows."
    deny = {
        "Statement": [
            {
                "Effect": "Deny",
                "Action": "s3:*",
                "Resource": "*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    }
    request = Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/x", {"aws:SecureTransport": "false"})
    assert decide(request, [MARKETING, deny]) == "ExplicitDeny"
    assert (
        decide(Request(request.action, request.resource, {"aws:SecureTransport": "true"}), [MARKETING, deny]) == "Allow"
    )
    assert decide(Request("ec2:RunInstances", "*"), [MARKETING]) == "ImplicitDeny"


def test_not_resource_deny_denies_everything_else() -> None:
    # reference_policies_elements_notresource.html: Deny with NotResource denies all but the listed resources.
    policy = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": "s3:*",
                "NotResource": ["arn:aws:s3:::HRBucket/Payroll", "arn:aws:s3:::HRBucket/Payroll/*"],
            },
        ]
    }
    assert allowed(Request("s3:GetObject", "arn:aws:s3:::HRBucket/Payroll/june.csv"), [policy])
    assert decide(Request("s3:GetObject", "arn:aws:s3:::HRBucket/Other/x"), [policy]) == "ExplicitDeny"


def test_session_policy_only_narrows_the_role() -> None:
    # access_policies.html#policies_session: "The resulting session's permissions are the intersection of
    # the role's identity-based policy and the session policies." A session policy cannot grant more.
    session = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::amzn-s3-demo-bucket/marketing/2024/*"}
        ]
    }
    inside = Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/2024/a")
    outside = Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/2023/a")
    assert allowed(inside, [MARKETING], [session]) and allowed(outside, [MARKETING])
    assert not allowed(outside, [MARKETING], [session])
    assert not allowed(Request("s3:DeleteObject", inside.resource), [MARKETING], [session])  # the role never allowed it


def test_string_not_equals_and_if_exists() -> None:
    policy = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "ec2:*",
                "Resource": "*",
                "Condition": {"StringEqualsIfExists": {"ec2:InstanceType": ["t3.micro"]}},
            }
        ]
    }
    assert allowed(Request("ec2:RunInstances", "*", {"ec2:InstanceType": "t3.micro"}), [policy])
    assert not allowed(Request("ec2:RunInstances", "*", {"ec2:InstanceType": "p5.48xlarge"}), [policy])
    assert allowed(Request("ec2:DescribeInstances", "*"), [policy])  # ...IfExists: absent key matches
    literal = {"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/${*}"}]}
    assert allowed(Request("s3:GetObject", "arn:aws:s3:::b/*"), [literal])
    assert not allowed(Request("s3:GetObject", "arn:aws:s3:::b/anything"), [literal])
