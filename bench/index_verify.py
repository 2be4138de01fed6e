"""What verifying signed provenance adds to a wheel fetch through `wheelfoundry index serve`.

    .venv/bin/python bench/index_verify.py [--wheels 20] [--sizes-mib 1,8]

The shipped template is deployed into the embedded AWS (moto server on 127.0.0.1: the versioned wheel
bucket and the ECC_NIST_P256 provenance key). For each size, --wheels wheels of incompressible bytes are
put in a channel, each with an envelope signed by the stack's KMS key exactly as Attest signs
(KMS Sign, MessageType=DIGEST). Then two fresh proxies (empty caches), one verifying and one not, run
side by side; every wheel is fetched over HTTP from each, interleaved, once ("cold": the verifying proxy
reads the wheel, hashes it, reads and checks the envelope, then serves it) and then once more ("warm":
the verified version is cached by its S3 version id: a HEAD, then the GET pinned to that version).
Per cell: the median of the --wheels fetches, in ms, wall time at the client until the last byte.

S3 here is a local moto server, so the absolute figures are far below a real bucket's; the difference
between the two rows is what verification costs (the hashing and the envelope's round trip on a cold
fetch, one HEAD on a warm one). Prints a table and writes bench/results/index_verify-<UTC>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("without verification", "with verification")


def wheel(name: str, size: int) -> bytes:
    """A wheel-shaped zip of ``size`` incompressible bytes (stored, so its size is about ``size``)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{name}/data.bin", os.urandom(size))
        zf.writestr(f"{name}-0.1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    return buffer.getvalue()


def publish(s3: Any, bucket: str, kms: Any, key_arn: str, channel: str, count: int, size: int) -> list[str]:
    from wheelfoundry.publishing import provenance

    sign = provenance.kms_signer(kms, key_arn)
    paths = []
    for i in range(count):
        name = f"bench_{size >> 20}m_{i}"
        filename, body = f"{name}-0.1.0-py3-none-any.whl", wheel(name, size)
        key = f"wheels/{channel}/{name.replace('_', '-')}/{filename}"
        stmt = provenance.statement(
            {"filename": filename, "sha256": hashlib.sha256(body).hexdigest()},
            {"framework": "extension"},
            {},
            {"stack": "bench", "state_machine": "arn:aws:states:us-east-1:123456789012:stateMachine:bench"},
            {"id": "bench", "channel": channel, "execution": "arn:aws:states:us-east-1:1:execution:bench:x"},
        )
        envelope = json.dumps(provenance.envelope(stmt, key_arn, sign)).encode()
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        s3.put_object(Bucket=bucket, Key=key + provenance.SUFFIX, Body=envelope)
        paths.append("/" + key)
    return paths


def fetch_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:  # the local proxy
        while response.read(1 << 20):
            pass
        assert response.status == 200
    return (time.perf_counter() - started) * 1000


def measure(s3: Any, bucket: str, paths: list[str], keys: Any) -> dict[str, dict[str, list[float]]]:
    """Both proxies fresh and side by side, fetches interleaved (which goes first alternates), so the
    shared machine's load falls on both alike."""
    from wheelfoundry_cli.index_server import serving

    out: dict[str, dict[str, list[float]]] = {m: {"cold": [], "warm": []} for m in MODES}
    with serving(s3, bucket) as plain, serving(s3, bucket, keys=keys) as checked:
        bases = dict(zip(MODES, (plain, checked), strict=True))
        for phase in ("cold", "warm"):
            for i, path in enumerate(paths):
                for mode in MODES if i % 2 == 0 else MODES[::-1]:
                    out[mode][phase].append(fetch_ms(bases[mode] + path))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=int, default=20)
    parser.add_argument("--sizes-mib", default="1,8")
    args = parser.parse_args()
    from wheelfoundry_local import EmbeddedAws
    from wheelfoundry_user.trust import Keyring, TrustedKey
    from wheelfoundry_user.verify import pem_of

    rows: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as state, EmbeddedAws(state_dir=state) as aws:
        stack = aws.deploy(ROOT / "template.yaml", {"BuildHeartbeatSeconds": "60"})
        s3, kms, bucket = aws.client("s3"), aws.client("kms"), stack.outputs["WheelBucketName"]
        arn = stack.outputs["ProvenanceKeyArn"]
        keys = Keyring((TrustedKey(pem_of(kms.get_public_key(KeyId=arn)["PublicKey"]), "the stack's key", arn),))
        for mib in (int(s) for s in args.sizes_mib.split(",")):
            paths = publish(s3, bucket, kms, arn, "bench", args.wheels, mib << 20)
            for mode, samples in measure(s3, bucket, paths, keys).items():
                medians = {k: statistics.median(v) for k, v in samples.items()}
                rows.append({"size_mib": mib, "mode": mode, "n": args.wheels, **medians, "samples": samples})
    load.append(os.getloadavg()[0])
    header = f"{'wheel':>7}  {'proxy':<22} {'cold median ms':>15} {'warm median ms':>15}"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row['size_mib']:>4} MiB  {row['mode']:<22} {row['cold']:>15.1f} {row['warm']:>15.1f}")
    for mib in sorted({r["size_mib"] for r in rows}):
        plain, checked = (
            next(r for r in rows if r["size_mib"] == mib and r["mode"] == m)
            for m in ("without verification", "with verification")
        )
        lines.append(
            f"{mib:>4} MiB  added by verification:  cold {checked['cold'] - plain['cold']:+.1f} ms, "
            f"warm {checked['warm'] - plain['warm']:+.1f} ms"
        )
    lines.append(
        f"median of {args.wheels} fetches each; load average {load[0]:.2f} -> {load[1]:.2f}, {os.cpu_count()} cpus"
    )
    print("\n".join(lines))
    out = ROOT / "bench" / "results" / f"index_verify-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    summary = [{k: v for k, v in r.items() if k != "samples"} for r in rows]
    out.write_text(json.dumps({"cpus": os.cpu_count(), "load": load, "rows": summary, "raw": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
