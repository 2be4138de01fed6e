"""Strict checks for the untrusted strings of a job (refs, URLs, versions, arch lists, paths).

The request schema already holds these to patterns; the build host checks them again because
job.json could have been written by something other than Validate. A value that fails here
never reaches a process. The stage scripts repeat the ref and URL checks in bash.
"""

from __future__ import annotations

import re

# git ref names as the request schema allows them, plus HEAD (an extension's default branch).
REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_BAD_REF = re.compile(r"(\.\.|//|/$|\.lock$|\.$|@\{)")
# https repositories (the schema's rule), or file:// for local mode's own fixtures.
URL = re.compile(r"^(https://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)+/?|file:///[A-Za-z0-9._/-]+)$")
S3_PREFIX = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9._/-]+/$")  # a job's own prefix
S3_URL = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9._/-]+\.(tar\.gz|tgz|zip)$")
ARCH_LIST = re.compile(r"^[0-9]{1,2}\.[0-9][af]?(\+PTX)?([; ][0-9]{1,2}\.[0-9][af]?(\+PTX)?)*$")
PYTHON = re.compile(r"^3\.[0-9]{1,2}$")
MINOR = re.compile(r"^[0-9]{1,2}\.[0-9]{1,3}$")  # a torch release X.Y
CUDA = re.compile(r"^[0-9]{2}\.[0-9]$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SUBDIR = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
DATE = re.compile(r"^[0-9]{8}$")
CELL = re.compile(r"^torch[0-9][0-9a-z.+]*-cp[0-9]{2,3}-[a-z0-9.]+-(x86_64|aarch64)$")  # an extension cell id
LABEL = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)*$")  # a PEP 440 local version label
# The package's own tests (request "test"): python's arguments (argv, never a shell) and pip requirements
# (names and versions only: no URL, path, marker or pip option reaches pip).
TEST_ARG = re.compile(r"^[A-Za-z0-9_{}./:=,@+-][A-Za-z0-9_{}./:=,@+ -]{0,299}$")
REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?"
    r"((==|!=|<=|>=|~=|<|>)[0-9][A-Za-z0-9.*+!]*)?(,(==|!=|<=|>=|~=|<|>)[0-9][A-Za-z0-9.*+!]*)*$"
)
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Environment variable names and values that go into an env file or a process environment.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UnsafeValue(ValueError):
    """A job field holds a value the build host refuses to use."""


def check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise UnsafeValue(f"{what}: {value!r} is not allowed (expected {pattern.pattern})")
    if ".." in value and pattern is not ARCH_LIST:
        raise UnsafeValue(f"{what}: {value!r} contains '..'")
    return value


def check_ref(value: str, what: str = "ref") -> str:
    check(REF, value, what)
    if _BAD_REF.search(value):
        raise UnsafeValue(f"{what}: {value!r} is not a valid git ref name")
    return value


def check_env(env: dict[str, str], what: str = "env") -> dict[str, str]:
    """Names must be identifiers and values single lines (docker --env-file has no quoting)."""
    for name, value in env.items():
        check(ENV_NAME, name, f"{what} name")
        if not isinstance(value, str) or "\n" in value or "\r" in value or "\0" in value:
            raise UnsafeValue(f"{what}.{name}: the value must be a single line of text")
    return env
