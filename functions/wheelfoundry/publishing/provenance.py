"""Signed build provenance: an in-toto Statement v1 with a SLSA v1 provenance predicate in a DSSE envelope.

Pure apart from the signer it is given (``sign(digest) -> DER signature``; on AWS a KMS ``Sign`` with
``MessageType=DIGEST`` on the stack's ECC_NIST_P256 key). What the signature means, and what it does
not, is in docs/provenance.md: the publishing function read these exact wheel bytes from the channel
and this job manifest from the job's prefix, and the stack's key signed that statement.

- Statement: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md
- SLSA provenance v1: https://slsa.dev/spec/v1.0/provenance
- DSSE envelope and PAE: https://github.com/secure-systems-lab/dsse/blob/master/protocol.md
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from wheelfoundry.errors import ProvenanceInvalid

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# This project's build type: what externalParameters and resolvedDependencies mean (docs/provenance.md).
BUILD_TYPE = "urn:wheelfoundry:provenance:build-type:v1"  # defined in docs/provenance.md (no public URL claimed)
SUFFIX = ".provenance.json"  # stored beside the wheel: wheels/<channel>/<project>/<wheel>.provenance.json
# A retest's signed result (request.retest): wheels/<channel>/<project>/<wheel>.tests/<run>.json
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
TESTS_DIR = ".tests/"
ALGORITHM = "ECDSA_SHA_256"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _dependencies(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The source (uri + digest) and the builder image; SLSA ResourceDescriptors."""
    out: list[dict[str, Any]] = []
    for name, src in sorted((manifest.get("sources") or {}).items()):
        if src.get("s3"):
            out.append({"name": name, "uri": src["s3"], "digest": {"sha256": src.get("sha256", "")}})
        elif src.get("repo") and src.get("commit"):  # a test job names the package but fetched no source
            out.append(
                {
                    "name": name,
                    "uri": f"git+{src['repo']}@{src.get('ref', '')}",
                    "digest": {"gitCommit": src.get("commit", "")},
                }
            )
    out += _toolkit_lock(manifest)
    builder, image = manifest.get("builder") or {}, manifest.get("image") or {}
    if builder.get("mode") == "docker":
        digest = {"sha256": str(builder["digest"]).removeprefix("sha256:")} if builder.get("digest") else {}
        out.append({"name": "builder-image", "uri": str(builder.get("image")), "digest": digest})
    elif builder:  # host mode (the embedded AWS): no image, the stages ran on the host named here
        annotations = {"mode": builder.get("mode"), "host": builder.get("host"), "recipe": image.get("recipe")}
        out.append({"name": "builder-image", "uri": f"host:{image.get('base', '')}", "annotations": annotations})
    return out


def _toolkit_lock(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CUDA toolkit lock the compiler came from, by the sha256 of the lock's bytes (install_cuda.py records
    it in the toolkit it installs): the stack's (the watcher wrote it) by its bucket key, else the bundle's."""
    toolkit = (manifest.get("toolchain") or {}).get("cuda_toolkit") or {}
    if not toolkit.get("lock_sha256"):
        return []
    stack_lock, bucket = manifest.get("toolkit_lock") or {}, (manifest.get("run") or {}).get("bucket", "")
    if stack_lock.get("key"):
        uri = f"s3://{bucket}/{stack_lock['key']}"
    else:
        uri = f"bundle:images/scripts/cuda/cuda-{toolkit.get('cuda')}-{toolkit.get('platform')}.toml"
    return [{"name": "cuda-toolkit-lock", "uri": uri, "digest": {"sha256": str(toolkit["lock_sha256"])}}]


def _content(value: Any) -> str:
    return base64.b64encode(json.dumps(value, sort_keys=True).encode()).decode()


def device_code(manifests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per job, per CUDA cell: the requested arch list, and per compiled file its SASS archs, PTX targets and
    PTX ISA versions (docs/device-code.md)."""
    out: dict[str, Any] = {}
    for key, manifest in sorted(manifests.items()):
        cells = manifest.get("device_code") or {}
        if not isinstance(cells, dict) or not cells:
            continue
        out[str(manifest.get("job_id", key))] = {
            str(cell): {
                "arch_list": rec.get("arch_list"),
                "status": rec.get("status"),
                "files": {
                    name: {k: held.get(k, []) for k in ("sass", "ptx", "ptx_isa")}
                    for name, held in sorted((rec.get("files") or {}).items())
                    if isinstance(held, dict)
                },
            }
            for cell, rec in sorted(cells.items())
            if isinstance(rec, dict)
        }
    return out


def abi(manifests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per job, per cell: stable ABI or not, the torch floor and what set it, and per compiled file the symbols
    that decided (wfbuild.wheels.abi, read from the file's dynamic imports after the build)."""
    out: dict[str, Any] = {}
    keys = ("stable", "floor", "extension_module", "torch_symbols", "floor_symbols")
    for key, manifest in sorted(manifests.items()):
        cells = manifest.get("abi") or {}
        if not isinstance(cells, dict) or not cells:
            continue
        out[str(manifest.get("job_id", key))] = {
            str(cell): {
                **{k: rec.get(k) for k in ("stable", "floor", "target", "target_from")},
                "files": {n: {k: f.get(k) for k in keys} for n, f in sorted((rec.get("files") or {}).items())},
            }
            for cell, rec in sorted(cells.items())
            if isinstance(rec, dict)
        }
    return out


def tested_in(manifests: Mapping[str, Mapping[str, Any]], filename: str) -> dict[str, list[str]]:
    """Per test job, the cells it installed ``filename`` in and whose test passed (its ``<wheel>.smoke.json``, as
    the manifest lists it): a stable-ABI wheel's are every torch of its range."""
    out: dict[str, list[str]] = {}
    for key, manifest in sorted(manifests.items()):
        for wheel in manifest.get("wheels") or [] if manifest.get("kind") == "test" else []:
            if isinstance(wheel, Mapping) and wheel.get("name") == filename and wheel.get("tested_cells"):
                out[str(manifest.get("job_id", key))] = [str(c) for c in wheel["tested_cells"]]
    return out


def statement(
    wheel: Mapping[str, Any],
    request: Mapping[str, Any],
    manifests: Mapping[str, Mapping[str, Any]],
    builder: Mapping[str, str],
    run: Mapping[str, Any],
) -> dict[str, Any]:
    """The statement for one published wheel.

    ``wheel``: filename, sha256, key. ``manifests``: the manifest of every job that built it, by its S3 key
    (a merged wheel has one per cell job). ``builder``: stack, state machine ARN, key ARN.
    """
    deps: list[dict[str, Any]] = []
    for key, manifest in sorted(manifests.items()):
        deps += [d for d in _dependencies(manifest) if d not in deps]
        deps.append({"name": "job-manifest", "uri": key, "digest": {"sha256": _digest(manifest)}})
    toolchains = {m.get("job_id", k): m.get("toolchain", {}) for k, m in sorted(manifests.items())}
    flags = {m.get("job_id", k): m.get("flags", {}) for k, m in sorted(manifests.items())}
    repro = {m.get("job_id", k): m.get("reproducibility", {}) for k, m in sorted(manifests.items())}
    byproducts = [
        {"name": "toolchain", "content": _content(toolchains)},
        {"name": "reproducibility", "content": _content(repro)},
    ]
    held = device_code(manifests)
    if held:  # a CUDA extension's cells: what each compiled file holds (wfbuild.cuda.devicecode)
        byproducts.append({"name": "device_code", "content": _content(held)})
    tested = tested_in(manifests, wheel["filename"])
    if tested:  # the test jobs: the cells (torch x variant x Python) their published bytes were installed in
        byproducts.append({"name": "tested_in", "content": _content(tested)})
    imports = abi(manifests)
    if imports:  # an extension's cells: stable ABI and floor, or the C++ symbols binding it to one torch
        byproducts.append({"name": "abi", "content": _content(imports)})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": wheel["filename"], "digest": {"sha256": wheel["sha256"]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"request": dict(request)},
                "internalParameters": {"channel": run.get("channel"), "layout": run.get("layout"), "flags": flags},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": f"{builder['stack']}:{builder['state_machine']}"},
                "metadata": {"invocationId": run.get("execution") or run["id"]},
                "byproducts": byproducts,
            },
        },
    }


def test_result(
    wheel: Mapping[str, Any], passed: Mapping[str, list[str]], request_ref: Mapping[str, Any], run: Mapping[str, Any]
) -> dict[str, Any]:
    """An in-toto test-result statement (https://github.com/in-toto/attestation/blob/main/spec/predicates/
    test-result.md) for a published wheel a retest installed, as published, in more cells (``passed``: test job ->
    cells); ``request_ref``: the run's request.json as a resource descriptor (uri, digest)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": wheel["filename"], "digest": {"sha256": wheel["sha256"]}}],
        "predicateType": TEST_RESULT_TYPE,
        "predicate": {
            "result": "PASSED",
            "configuration": [{"name": "request", **request_ref}],
            "url": run.get("execution") or run["id"],
            "passedTests": sorted({c for cells in passed.values() for c in cells}),
            "warnedTests": [],
            "failedTests": [],
        },
    }


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, so the type cannot be swapped."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(stmt: Mapping[str, Any], key_id: str, sign: Callable[[bytes], bytes]) -> dict[str, Any]:
    """A DSSE envelope: ``sign`` gets the SHA-256 digest of the PAE and returns a DER ECDSA signature."""
    payload = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    signature = sign(hashlib.sha256(pae(PAYLOAD_TYPE, payload)).digest())
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": key_id, "sig": base64.b64encode(signature).decode()}],
    }


def kms_signer(kms: Any, key_id: str) -> Callable[[bytes], bytes]:
    """KMS Sign of a precomputed digest: the statement may exceed KMS's 4096-byte RAW message limit."""

    def sign(digest: bytes) -> bytes:
        out = kms.sign(KeyId=key_id, Message=digest, MessageType="DIGEST", SigningAlgorithm=ALGORITHM)
        return bytes(out["Signature"])

    return sign


def open_envelope(data: bytes) -> tuple[dict[str, Any], bytes, list[bytes]]:
    """(statement, payload bytes, signatures) of an envelope, or ProvenanceInvalid naming what is wrong."""
    try:
        env = json.loads(data)
        if env.get("payloadType") != PAYLOAD_TYPE:
            raise ProvenanceInvalid(f"payloadType is {env.get('payloadType')!r}, not {PAYLOAD_TYPE!r}")
        payload = base64.b64decode(env["payload"], validate=True)
        sigs = [base64.b64decode(s["sig"], validate=True) for s in env["signatures"]]
        stmt = json.loads(payload)
    except (ValueError, KeyError, TypeError) as exc:
        raise ProvenanceInvalid(f"not a DSSE envelope: {exc}") from exc
    if stmt.get("_type") != STATEMENT_TYPE or stmt.get("predicateType") != PREDICATE_TYPE:
        raise ProvenanceInvalid(f"not an in-toto v1 SLSA provenance statement ({stmt.get('predicateType')!r})")
    return stmt, payload, sigs
