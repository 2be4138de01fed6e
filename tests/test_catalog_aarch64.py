"""aarch64 wheels as upstream built each release: OpenBLAS at upstream's tag, oneDNN + ACL only where
upstream had them (catalog aarch64_mkldnn; a request's own mkldnn / acl still wins), and catalog verify
comparing both with the fixtures' upstream facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli import upstream
from wheelfoundry_cli.upstream_facts import FACTS_FILE, read_facts_toml, read_files

from wheelfoundry.catalog.catalog import catalog_from_text, load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.jobs import Job
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "upstream"
CATALOG_TOML = ROOT / "functions" / "wheelfoundry" / "data" / "catalog.toml"
ACL_ENV = ("ACL_ROOT_DIR", "ACL_INCLUDE_DIR", "ACL_LIBRARY")


def job(version: str, platform: str = "aarch64", **target: Any) -> Job:
    raw = {"version": version, "python": ["3.10"], "targets": [{"platform": platform, **target}], "packages": ["torch"]}
    (only,) = plan_request(parse_request(raw), load_catalog(), load_config()).jobs
    return only


@pytest.mark.parametrize("version", ["1.12.1", "1.13.1"])
def test_a_request_without_mkldnn_gets_upstreams_aarch64_build_no_onednn_no_acl(version: str) -> None:
    j = job(version)
    assert j.env["USE_MKLDNN"] == "0" and j.env["USE_MKLDNN_ACL"] == "0"
    assert not set(ACL_ENV) & set(j.env)
    assert j.image.build_args["ACL_VERSION"] == "none"  # install_acl.sh builds nothing
    assert j.image.build_args["OPENBLAS_VERSION"] == "v0.3.19"  # pytorch/builder build_aarch64_wheel.py
    assert j.env["BLAS"] == "OpenBLAS" and not j.smoke.mkldnn


def test_an_explicit_mkldnn_or_acl_wins_over_the_release_default() -> None:
    default_acl = load_config().toolchain["acl"]
    for target in ({"mkldnn": True}, {"acl": True}, {"mkldnn": True, "acl": True}):
        j = job("1.13.1", **target)
        assert j.env["USE_MKLDNN"] == "1" and j.env["USE_MKLDNN_ACL"] == "1", target
        assert j.env["ACL_ROOT_DIR"] == "/acl" and j.smoke.mkldnn
        assert j.image.build_args["ACL_VERSION"] == default_acl  # the farm's ACL: upstream 1.13 had none
    no_acl = job("1.13.1", mkldnn=True, acl=False)
    assert no_acl.env["USE_MKLDNN"] == "1" and no_acl.env["USE_MKLDNN_ACL"] == "0"
    assert no_acl.image.build_args["ACL_VERSION"] == "none"
    off = job("2.5.1", mkldnn=False)
    assert off.env["USE_MKLDNN"] == "0" and off.image.build_args["ACL_VERSION"] == "none"


@pytest.mark.parametrize(
    ("version", "acl", "openblas"), [("2.0.1", "v22.11", "v0.3.19"), ("2.5.1", "v24.04", "v0.3.25")]
)
def test_from_2_0_the_default_keeps_onednn_with_upstreams_acl(version: str, acl: str, openblas: str) -> None:
    j = job(version)
    assert j.env["USE_MKLDNN"] == "1" and j.env["USE_MKLDNN_ACL"] == "1" and j.smoke.mkldnn
    assert (j.image.build_args["ACL_VERSION"], j.image.build_args["OPENBLAS_VERSION"]) == (acl, openblas)


def test_x86_64_keeps_onednn_by_default_for_every_release() -> None:
    assert job("1.13.1", platform="x86_64").env["USE_MKLDNN"] == "1"
    assert job("1.12.1", platform="x86_64").smoke.mkldnn


@pytest.mark.parametrize("minor", ["1.12", "1.13", "2.0", "2.5", "2.14"])
def test_verify_finds_no_unexplained_difference_and_compares_onednn(minor: str) -> None:
    from wheelfoundry_cli.catalog_verify import compare

    findings = {f.fact: f for f in compare(load_catalog(), read_facts_toml(FIXTURES / f"torch-{minor}" / FACTS_FILE))}
    assert [name for name, f in findings.items() if f.status == "DIFFERS"] == []
    assert findings["aarch64.mkldnn"].status == "same"
    if minor in ("1.12", "1.13", "2.0"):
        assert findings["aarch64.openblas"].status == "same" and findings["aarch64.openblas"].catalog == "v0.3.19"
    if minor in ("1.12", "1.13"):
        assert (
            "USE_MKLDNN=0" in findings["aarch64.mkldnn"].catalog
            and "ACL_VERSION=none" in findings["aarch64.mkldnn"].catalog
        )


def test_verify_reports_the_old_aarch64_defaults_as_unexplained() -> None:
    from wheelfoundry_cli.catalog_verify import compare

    text = CATALOG_TOML.read_text(encoding="utf-8")
    start = text.index('torch = "1.13"')
    end = text.index("[[release]]", start)
    old = (
        text[:start]
        + text[start:end]
        .replace("aarch64_mkldnn = false\n", "")
        .replace('[release.aarch64]\nopenblas = "v0.3.19"\n', "")
        + text[end:]
    )
    assert old != text
    facts = read_facts_toml(FIXTURES / "torch-1.13" / FACTS_FILE)
    differs = {f.fact: f.catalog for f in compare(catalog_from_text(old), facts) if f.status == "DIFFERS"}
    assert set(differs) == {"aarch64.mkldnn", "aarch64.openblas"}, differs
    assert differs["aarch64.openblas"] == load_config().toolchain["openblas"]


def test_legacy_aarch64_script_reader(tmp_path: Path) -> None:
    # build_aarch64_wheel.py's shapes (pytorch/builder release/1.13 and release/2.0), written for this test
    old = (
        'host.run_cmd(f"git clone https://github.com/xianyi/OpenBLAS -b v0.3.19 {git_clone_flags}")\n'
        'build_vars = "USE_BREAKPAD=0 "\n'
        'build_vars += " CMAKE_SHARED_LINKER_FLAGS=-Wl,-z,max-page-size=0x10000"\n'
    )
    new = old + 'if enable_mkldnn:\n    build_vars += " USE_MKLDNN=ON USE_MKLDNN_ACL=ON"\n'
    assert upstream.legacy_aarch64_mkldnn(old) is False
    assert upstream.legacy_aarch64_mkldnn(new) is None  # behind a flag: the wheel's ACL decides
    (tmp_path / "build_aarch64_wheel.py").write_text(old, encoding="utf-8")
    release = load_catalog().release("1.13")
    assert release is not None
    facts = read_files(tmp_path, release, {"aarch64_legacy": "builder-1.13 build_aarch64_wheel.py"})
    assert (facts.mkldnn, facts.openblas, facts.provenance["aarch64"]) == (
        False,
        "v0.3.19",
        "builder-1.13 build_aarch64_wheel.py",
    )
