"""`local demo`'s user side (issue 65): the published wheel through the variant index, with pip and with uv.

The whole demo (`make demo`) takes about two minutes; this runs its last step, ``install_both``, as the demo
calls it: the user's environment is a thin venv over a cached environment with torch (here: this repository's
.venv, which has torch, numpy, pytest and hypothesis), the variant index a PEP 503 tree served on 127.0.0.1
holding a tiny wheel that requires torch, and the "extension's tests" a test file that imports it.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.tiny_wheels import pure_wheel
from wfbuild.envs import thin_env
from wheelfoundry_local.demo import install_both, show_variant_indexes

PROJECT = "wf-demo-probe"


@pytest.fixture
def variant_index(tmp_path: Path) -> Iterator[str]:
    """``simple/demo/torch2.13-cpu/`` with one wheel of PROJECT (Requires-Dist: torch), on 127.0.0.1."""
    root = tmp_path / "edge"
    wheel = pure_wheel(root / "files", PROJECT, "0.1.0", ["torch"], code="WHERE = __file__\n")
    page = root / "simple" / "demo" / "torch2.13-cpu" / PROJECT / "index.html"
    page.parent.mkdir(parents=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page.write_text(f'<a href="../../../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n')
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple/demo/torch2.13-cpu/"
    finally:
        server.shutdown()
        server.server_close()


def test_the_variant_index_line_names_torch_and_variant() -> None:
    lines: list[str] = []
    public = {"variant_indexes": {"torch2.13-cpu": "https://d1.example/simple/demo/torch2.13-cpu/"}}
    served = show_variant_indexes(
        public, lambda url: url.replace("https://d1.example", "http://127.0.0.1:9"), lines.append
    )
    assert served == {"torch2.13-cpu": "http://127.0.0.1:9/simple/demo/torch2.13-cpu/"}
    assert (
        "variant index (torch 2.13, cpu): http://127.0.0.1:9/simple/demo/torch2.13-cpu/"
        "  (public: https://d1.example/simple/demo/torch2.13-cpu/)"
    ) in lines


def test_the_demo_installs_through_the_variant_index_with_pip_and_with_uv(tmp_path: Path, variant_index: str) -> None:
    users = thin_env(tmp_path / "demo-venv", sys.executable, Path(sys.prefix))  # the demo's user_env, cached env .venv
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_probe.py").write_text(
        "import sys, wf_demo_probe\n\n"
        "def test_installed_in_the_venv_under_test():\n"
        "    assert wf_demo_probe.WHERE.startswith(sys.prefix), (wf_demo_probe.WHERE, sys.prefix)\n"
    )
    lines: list[str] = []
    request = {"torch": ["2.13"]}
    variants = {"torch2.13-cpu": variant_index}
    code = install_both(request, variants, "http://127.0.0.1:9/unused/", PROJECT, users, tests, lines.append)
    text = "\n".join(lines)
    assert code == 0, text
    for installer in ("pip", "uv"):
        assert f"{installer}: installed through {variant_index}, the extension's tests passed" in lines, text
    assert f"uv pip install --python {users}-uv/bin/python --index-url {variant_index} {PROJECT}" in text
    assert f"pip passed, uv passed through {variant_index}" in lines
    # each installer put the wheel into its own venv (its INSTALLER file names it); uv's venv is one uv made
    for installer, venv in (("pip", users), ("uv", Path(f"{users}-uv"))):
        (site,) = venv.glob("lib/python*/site-packages")
        assert (site / "wf_demo_probe-0.1.0.dist-info" / "INSTALLER").read_text().strip() == installer, venv
    assert "uv = " in Path(f"{users}-uv/pyvenv.cfg").read_text()
