"""Upload: after PublishIndex, a run's signed wheels go to the request's `options.publish` target.

Credentials: for CodeArtifact a 15-minute token from GetAuthorizationToken (the role may ask for it on
the one domain of the request only through sts:GetServiceBearerToken for codeartifact); for PyPI and
every other index the token in the Secrets Manager secret the stack was deployed with
(PublishTokenSecretArn), which only the Upload function's role may read. The secret holds the token
(PyPI: user `__token__`) or JSON {"username": ..., "password": ...}.

Signatures are checked with KMS Verify on the stack's provenance key (the envelope's digest, as Attest
signed it), then the statement's subject against the bytes read here: valid provenance, which Attest
gives only to wheels whose published bytes passed their tests.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.aws.attest import published
from wheelfoundry.errors import ProvenanceInvalid, PublishFailed
from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.uploads import Candidate, Credentials, publish
from wheelfoundry.request.publish_targets import CodeArtifactRepo, PublishTarget

TOKEN_SECONDS = 900  # the Upload function's own limit: a token outlives no run of it


def secret_credentials(secrets: Any, secret_arn: str) -> Credentials:
    try:
        text = secrets.get_secret_value(SecretId=secret_arn)["SecretString"].strip()
    except ClientError as exc:
        raise PublishFailed(f"reading the publish token {secret_arn}: {exc}") from exc
    if text.startswith("{"):
        data = json.loads(text)
        return Credentials(str(data.get("username") or "__token__"), str(data["password"]))
    return Credentials("__token__", text)


def codeartifact_endpoints(client: Any, repo: CodeArtifactRepo) -> tuple[str, str, Credentials]:
    """(upload URL, simple index URL, credentials) of a CodeArtifact PyPI repository."""
    owner = {"domainOwner": repo.owner} if repo.owner else {}
    try:
        token = client.get_authorization_token(domain=repo.domain, durationSeconds=TOKEN_SECONDS, **owner)
        endpoint = client.get_repository_endpoint(
            domain=repo.domain, repository=repo.repository, format="pypi", **owner
        )["repositoryEndpoint"]
    except ClientError as exc:
        raise PublishFailed(f"CodeArtifact {repo.domain}/{repo.repository}: {exc}") from exc
    return endpoint, endpoint.rstrip("/") + "/simple/", Credentials("aws", token["authorizationToken"])


def endpoints(
    target: PublishTarget, secrets: Any, codeartifact: Any, secret_arn: str
) -> tuple[str, str, Credentials | None]:
    if target.codeartifact is not None:
        return codeartifact_endpoints(codeartifact, target.codeartifact)
    upload_url, index_url = target.endpoints()
    if secret_arn:
        return upload_url, index_url, secret_credentials(secrets, secret_arn)
    if target.kind != "url":  # PyPI and TestPyPI take no anonymous upload; an index of one's own may
        why = "deploy the stack with PublishTokenSecretArn=<the Secrets Manager secret holding the token>"
        raise PublishFailed(f"no token for {target.name}: {why}")
    return upload_url, index_url, None


def kms_unverified(kms: Any, key_id: str, filename: str, digest: str, envelope: bytes | None) -> str | None:
    """Why this wheel's provenance is not valid (None: it is), checked by KMS with the stack's key."""
    if envelope is None:
        return f"unsigned ({filename}{provenance.SUFFIX} not found)"
    try:
        stmt, payload, signatures = provenance.open_envelope(envelope)
    except ProvenanceInvalid as exc:
        return f"provenance unreadable: {exc}"
    message = hashlib.sha256(provenance.pae(provenance.PAYLOAD_TYPE, payload)).digest()
    valid = False
    for signature in signatures:
        try:
            valid = kms.verify(
                KeyId=key_id,
                Message=message,
                MessageType="DIGEST",
                Signature=signature,
                SigningAlgorithm=provenance.ALGORITHM,
            )["SignatureValid"]
        except ClientError:  # KMSInvalidSignatureException: another key, or an altered statement
            continue
        if valid:
            break
    if not valid:
        return "signature does not verify with the stack's provenance key"
    subjects = {s.get("name"): (s.get("digest") or {}).get("sha256") for s in stmt.get("subject", [])}
    if subjects.get(filename) != digest:
        return f"sha256:{digest} is not the statement's subject"
    return None


def _get(s3: Any, bucket: str, key: str) -> bytes | None:
    try:
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError:
        return None


def _download(s3: Any, bucket: str, key: str, path: Path) -> str:
    """Streamed to /tmp (a CUDA wheel is hundreds of MB); its sha256 as read."""
    digest, body = hashlib.sha256(), s3.get_object(Bucket=bucket, Key=key)["Body"]
    with path.open("wb") as out:
        while chunk := body.read(8 << 20):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def upload_run(
    event: dict[str, Any], clients: dict[str, Any], secret_arn: str, key_id: str, work: Path
) -> dict[str, Any]:
    run = event["run"]
    target = PublishTarget.from_dict(run["publish"])
    s3, bucket = clients["s3"], run["bucket"]
    upload_url, index_url, auth = endpoints(target, clients["secretsmanager"], clients["codeartifact"], secret_arn)
    work.mkdir(parents=True, exist_ok=True)
    jobs = (event.get("build_jobs") or []) + (event.get("jobs") or [])  # as Attest reads them
    candidates, wheels = [], {w["filename"]: w for w in published(s3, bucket, run, jobs)}
    try:
        for name, wheel in sorted(wheels.items()):
            digest = _download(s3, bucket, wheel["key"], work / name)
            envelope = _get(s3, bucket, wheel["key"] + provenance.SUFFIX)
            why = kms_unverified(clients["kms"], key_id, name, digest, envelope)
            candidates.append(Candidate(name, digest, (work / name).stat().st_size, why))
        outcomes = publish(candidates, lambda n: work / n, target, upload_url, index_url, auth)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {
        "status": "succeeded",
        "target": target.name,
        "uploaded": [],
        "skipped": [],
        "refused": [],
    }
    for o in outcomes:
        result[o.action].append(o.filename if o.action == "uploaded" else {"wheel": o.filename, "reason": o.reason})
    if result["refused"]:
        result["status"] = "partial"
    s3.put_object(Bucket=bucket, Key=f"runs/{run['id']}/upload.json", Body=json.dumps(result, indent=2).encode())
    return result
