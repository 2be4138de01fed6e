"""A public channel as uv and pip users meet it (issue 65), with the real resolvers from the dev extras.

The channel is written by the farm's own PublishIndex into the embedded bucket and served by the local edge
(the template's CloudFront Function, error pages and bucket policy). Beside it, a second local index plays
PyPI: a fake tiny ``torch`` 2.11.0 and 2.12.0 and a ``six``, so nothing is downloaded from outside and no real
torch is needed. Every command runs without caches or user configuration.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import TEMPLATE
from tests.local.test_edge_viewers import publish
from tests.tiny_wheels import metadata_of, pure_wheel
from wheelfoundry.publishing.edge import WHEEL_CACHE
from wheelfoundry.publishing.index import YANKED
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.edge import serving_edge

BIN = Path(sys.executable).parent
PIN = {"2.11": "torch>=2.11,<2.12", "2.12": "torch>=2.12,<2.13"}


def _upload(aws: EmbeddedAws, bucket: str, wheel: Path, variants: str = "") -> str:
    project = wheel.name.split("-")[0].replace("_", "-")
    key = f"wheels/ci/{project}/{wheel.name}"
    s3, data, meta = aws.client("s3"), wheel.read_bytes(), metadata_of(wheel)
    s3.put_object(
        Bucket=bucket,
        Key=f"{key}.metadata",
        Body=meta,
        Metadata={"sha256": hashlib.sha256(meta).hexdigest()},
    )
    s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=data,
        Metadata={"sha256": hashlib.sha256(data).hexdigest(), "wf-variants": variants},
        CacheControl=WHEEL_CACHE,
    )
    return key


def _second_index(root: Path) -> Path:
    """A PEP 503 tree (simple/<project>/index.html) of a fake torch and six: what PyPI would answer."""
    wheels = [
        pure_wheel(root / "files", "torch", "2.11.0"),
        pure_wheel(root / "files", "torch", "2.12.0"),
        pure_wheel(root / "files", "six", "1.17.0"),
    ]
    for project in ("torch", "six"):
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        links = [
            f'<a href="../../files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>'
            for w in wheels
            if w.name.startswith(f"{project}-")
        ]
        page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return root


@pytest.fixture(scope="module")
def channel(embedded_aws: EmbeddedAws, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The channel ``ci`` behind the local edge, and the second index; their URLs."""
    aws: EmbeddedAws = embedded_aws
    aws.reset()
    stack: DeployedStack = aws.deploy(TEMPLATE, {"PublicChannels": "ci"})
    bucket = stack.outputs["WheelBucketName"]
    built = tmp_path_factory.mktemp("channel")
    _upload(aws, bucket, pure_wheel(built, "wf-dep", "1.0"))  # a dependency from the same channel
    for torch, label in (("2.11", "cpu"), ("2.11", "cu130"), ("2.12", "cpu")):
        cell = pure_wheel(built, "wf-ext", f"1.0+pt{torch.replace('.', '')}{label}", [PIN[torch], "wf-dep"])
        _upload(aws, bucket, cell, f"torch-{torch}.0+{label}")
    _upload(aws, bucket, pure_wheel(built, "wf-probe", "1.0"))
    yanked = _upload(aws, bucket, pure_wheel(built, "wf-probe", "1.1"))
    aws.client("s3").put_object(Bucket=bucket, Key=f"{yanked}{YANKED}", Body=b"withdrawn: broken")
    publish(aws, stack, "ci")
    handler = partial(SimpleHTTPRequestHandler, directory=str(_second_index(tmp_path_factory.mktemp("pypi"))))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with serving_edge(aws, stack) as edge:
            yield {"channel": f"{edge.url}/simple/ci/", "pypi": f"http://127.0.0.1:{server.server_port}/simple/"}
    finally:
        server.shutdown()
        server.server_close()


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))},
        "XDG_CONFIG_HOME": str(cwd / "config"),  # no user's uv.toml or pip.conf
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_PYTHON": sys.executable,
    }
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def uv_install(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    target = tmp / "target"
    return _run([str(BIN / "uv"), "pip", "install", "--no-cache", "--no-config", "--target", str(target), *args], tmp)


def pip_install(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    target = tmp / "target"
    argv = [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check"]
    return _run([*argv, "--target", str(target), *args], tmp)


def installed(tmp: Path) -> set[str]:
    return {p.name.removesuffix(".dist-info") for p in (tmp / "target").glob("*.dist-info")}


def test_uv_and_pip_take_the_channel_beside_another_index(channel: dict[str, str], tmp_path: Path) -> None:
    """uv asks the extra index first for each name: the channel's 404 for six lets it go on (a 403 stopped it)."""
    for name, install in (("uv", uv_install), ("pip", pip_install)):
        tmp = tmp_path / name
        tmp.mkdir()
        done = install(tmp, "--index-url", channel["pypi"], "--extra-index-url", channel["channel"], "wf-probe", "six")
        assert done.returncode == 0, (name, done.stderr)
        # wf-probe 1.1 is yanked: skipped by both resolvers unless pinned
        assert installed(tmp) == {"wf_probe-1.0", "six-1.17.0"}, name


def test_a_yanked_wheel_is_installed_only_when_pinned(channel: dict[str, str], tmp_path: Path) -> None:
    for name, install in (("uv", uv_install), ("pip", pip_install)):
        tmp = tmp_path / name
        tmp.mkdir()
        done = install(tmp, "--index-url", channel["channel"], "wf-probe==1.1")
        assert done.returncode == 0, (name, done.stderr)
        assert installed(tmp) == {"wf_probe-1.1"}, name
        assert "yanked" in (done.stderr + done.stdout).lower(), name  # and the user is told


@pytest.mark.parametrize("torch", ["2.11", "2.12"])
def test_the_variant_index_gives_each_torch_its_build_and_the_channels_dependency(
    channel: dict[str, str], tmp_path: Path, torch: str
) -> None:
    variant = f"{channel['channel']}torch{torch}-cpu/"
    label = f"pt{torch.replace('.', '')}cpu"
    for name, install in (("uv", uv_install), ("pip", pip_install)):
        tmp = tmp_path / name
        tmp.mkdir()
        done = install(tmp, "--index-url", channel["pypi"], "--extra-index-url", variant, "wf-ext", f"torch=={torch}.*")
        assert done.returncode == 0, (name, done.stderr)
        assert installed(tmp) == {f"wf_ext-1.0+{label}", "wf_dep-1.0", f"torch-{torch}.0"}, name


def test_a_mismatched_install_is_refused_by_the_resolver(channel: dict[str, str], tmp_path: Path) -> None:
    """torch 2.12 with the 2.11 index, and 2.11 and 2.12 with the channel-wide index (wf-ext has cpu and cu130
    builds, which one torch pin cannot tell apart, so it lists none): no install, rather than the wrong build."""
    wrong = [(f"{channel['channel']}torch2.11-cpu/", "2.12"), (channel["channel"], "2.11")]
    for index, torch in wrong:
        for name, install in (("uv", uv_install), ("pip", pip_install)):
            tmp = tmp_path / f"{name}-{torch}"
            tmp.mkdir()
            done = install(
                tmp, "--index-url", channel["pypi"], "--extra-index-url", index, "wf-ext", f"torch=={torch}.*"
            )
            assert done.returncode != 0 and "wf-ext" in done.stderr.lower().replace("_", "-"), (name, index, done)
            assert not (tmp / "target").exists() or installed(tmp) == set(), name
    tmp = tmp_path / "wide-2.12"
    tmp.mkdir()
    done = uv_install(
        tmp, "--index-url", channel["pypi"], "--extra-index-url", channel["channel"], "wf-ext", "torch==2.12.*"
    )
    # one 2.12 build, but wf-ext has builds of two variants: a cu130 torch 2.12 user would get the cpu one, so
    # the channel-wide page lists none of them; the variant index is the way (the test above)
    assert done.returncode != 0 and not installed(tmp), done.stderr


def test_a_uv_project_with_the_channel_as_an_explicit_index_locks(channel: dict[str, str], tmp_path: Path) -> None:
    # An explicit index serves only the names [tool.uv.sources] sends to it, and uv reads sources of the
    # project's own dependencies only: the channel's dependency (wf-dep) is named too, as docs/public-channels.md says.
    (tmp_path / "pyproject.toml").write_text(
        f"""[project]
name = "app"
version = "0"
requires-python = ">=3.9"
dependencies = ["wf-ext", "wf-dep", "torch==2.12.*", "six"]

[[tool.uv.index]]
name = "wheelfoundry"
url = "{channel["channel"]}torch2.12-cpu/"
explicit = true

[[tool.uv.index]]
name = "pypi"
url = "{channel["pypi"]}"
default = true

[tool.uv.sources]
wf-ext = {{ index = "wheelfoundry" }}
wf-dep = {{ index = "wheelfoundry" }}
"""
    )
    done = _run([str(BIN / "uv"), "lock", "--no-cache"], tmp_path)
    assert done.returncode == 0, done.stderr
    lock = (tmp_path / "uv.lock").read_text()
    assert 'name = "wf-ext"\nversion = "1.0+pt212cpu"' in lock and 'name = "wf-dep"' in lock
    assert "torch2.12-cpu/" in lock and 'version = "2.12.0"' in lock
    done = _run([str(BIN / "uv"), "sync", "--no-cache", "--frozen", "--no-install-project"], tmp_path)
    assert done.returncode == 0, done.stderr
    found = {p.name for p in (tmp_path / ".venv").glob("lib/python*/site-packages/*.dist-info")}
    assert {"wf_ext-1.0+pt212cpu.dist-info", "wf_dep-1.0.dist-info", "torch-2.12.0.dist-info"} <= found
