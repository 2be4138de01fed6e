"""`wheelfoundry publish RUN|CHANNEL --to pypi|testpypi|codeartifact:DOMAIN/REPO[@OWNER]|URL`.

From the user's shell, with their credentials: the run's (or channel's) wheels are read from the stack's
bucket (sha256 checked against its index), each is checked against its signed provenance with the
stack's public key (`wheelfoundry fetch`'s own download and check), then
wheelfoundry.publishing.uploads decides and uploads with
twine. The token: for CodeArtifact GetAuthorizationToken; otherwise `--token-secret ARN` (Secrets
Manager), else twine's own TWINE_USERNAME / TWINE_PASSWORD, else none (an index without auth).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from wheelfoundry.aws.uploads import codeartifact_endpoints, secret_credentials
from wheelfoundry.errors import PublishFailed
from wheelfoundry.publishing.uploads import Candidate, Credentials, Outcome, publish
from wheelfoundry.request.publish_targets import PublishTarget
from wheelfoundry_user import UserError
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.wheels import Expect, channels, download, indexed, run_wheels


def endpoints(farm: Farm, target: PublishTarget, token_secret: str | None) -> tuple[str, str, Credentials | None]:
    if target.codeartifact is not None:
        return codeartifact_endpoints(farm.client("codeartifact"), target.codeartifact)
    upload_url, index_url = target.endpoints()
    if token_secret:
        return upload_url, index_url, secret_credentials(farm.client("secretsmanager"), token_secret)
    if os.environ.get("TWINE_PASSWORD"):
        return (
            upload_url,
            index_url,
            Credentials(os.environ.get("TWINE_USERNAME") or "__token__", os.environ["TWINE_PASSWORD"]),
        )
    return upload_url, index_url, None


def publish_wheels(
    farm: Farm,
    spec: str,
    package: str | None,
    target: PublishTarget,
    token_secret: str | None,
    keys: Any,
    source: str | None = None,
    builder: str | None = None,
) -> list[Outcome]:
    """Check, decide and upload; every wheel's outcome (refusals included)."""
    is_channel = spec in channels(farm) and not spec.startswith("arn:")
    wheels = indexed(farm, spec, package) if is_channel else run_wheels(farm, spec, package)
    upload_url, index_url, auth = endpoints(farm, target, token_secret)
    with tempfile.TemporaryDirectory(prefix="wf-publish-") as tmp:
        candidates = []
        for wheel in wheels:
            # fetch's own download: sha256 against the index, then the signed statement (wheelfoundry verify)
            got = download(farm, wheel, Path(tmp), Expect(keys, source, builder))
            size = int(got.get("size") or 0)
            candidates.append(Candidate(wheel.filename, got.get("sha256") or wheel.sha256, size, got.get("refused")))
        try:
            return publish(candidates, lambda name: Path(tmp) / name, target, upload_url, index_url, auth)
        except PublishFailed as exc:
            raise UserError(str(exc)) from None
