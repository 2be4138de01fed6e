"""The catalog against the reference compatibility table (shared/reference/compatibility.md).

The expected rows are typed in here from the reference, independently of catalog.toml, so a
wrong edit of the catalog fails a test.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from tests.helpers import ROOT
from wheelfoundry.catalog.catalog import catalog_from_text, classify, load_catalog
from wheelfoundry.catalog.resolve import Unresolvable, resolve_version

# torch minor: (torchvision, torchaudio, torchtext, torchdata, python range, stable CUDA, experimental CUDA)
REFERENCE = {
    "1.12": ("0.13", "0.12", "0.13", "0.4", ("3.7", "3.10"), ["11.3"], ["11.6"]),
    "1.13": ("0.14", "0.13", "0.14", "0.5", ("3.7", "3.10"), ["11.6"], ["11.7"]),
    "2.0": ("0.15", "2.0", "0.15", "0.6", ("3.8", "3.11"), ["11.7"], ["11.8"]),
    "2.1": ("0.16", "2.1", "0.16", None, ("3.8", "3.11"), ["11.8"], ["12.1"]),  # torchdata 0.7 unconfirmed
    # 2.2 / 2.3: Python 3.12 too (pytorch/test-infra@release/2.2 and 2.3; the reference table said 3.11)
    "2.2": ("0.17", "2.2", "0.17", None, ("3.8", "3.12"), ["11.8"], ["12.1"]),
    "2.3": ("0.18", "2.3", "0.18", None, ("3.8", "3.12"), ["11.8"], ["12.1"]),
    "2.4": ("0.19", "2.4", None, "0.8", ("3.8", "3.12"), ["11.8", "12.1"], ["12.4"]),
    "2.5": ("0.20", "2.5", None, "0.9", ("3.9", "3.12"), ["11.8", "12.1", "12.4"], []),
    "2.6": ("0.21", "2.6", None, "0.11", ("3.9", "3.13"), ["11.8", "12.4"], ["12.6"]),
    "2.7": ("0.22", "2.7", None, None, ("3.9", "3.13"), ["11.8", "12.6"], ["12.8"]),
    "2.8": ("0.23", "2.8", None, None, ("3.9", "3.13"), ["12.6", "12.8"], ["12.9"]),
    "2.9": ("0.24", "2.9", None, None, ("3.10", "3.14"), ["12.6", "12.8"], ["13.0"]),
}


def _python_range(low: str, high: str) -> list[str]:
    lo, hi = int(low.split(".")[1]), int(high.split(".")[1])
    return [f"3.{m}" for m in range(lo, hi + 1)]


@pytest.mark.parametrize("minor", sorted(REFERENCE))
def test_every_reference_row_resolves(minor: str) -> None:
    vision, audio, text, data, pyrange, stable, experimental = REFERENCE[minor]
    resolved = resolve_version(f"{minor}.0", load_catalog())
    expected = {"torchvision": vision, "torchaudio": audio, "torchtext": text, "torchdata": data}
    for library, lib_minor in expected.items():
        if lib_minor is None:
            assert library not in resolved.paired, f"{minor} must not pair {library}"
        else:
            assert resolved.paired[library].startswith(lib_minor + "."), (library, resolved.paired[library])
    assert list(resolved.python) == _python_range(*pyrange)
    release = resolved.release
    assert release is not None
    assert list(release.cuda) == stable
    assert list(release.cuda_experimental) == experimental


@pytest.mark.parametrize(
    ("torch", "vision", "audio", "text", "data"),
    [
        ("1.13.1", "0.14.1", "0.13.1", "0.14.1", "0.5.1"),
        ("1.12.1", "0.13.1", "0.12.1", "0.13.1", "0.4.1"),
        ("2.0.0-rc2", "0.15.0-rc2", "2.0.0-rc2", "0.15.0-rc2", "0.6.0-rc2"),
        ("2.0.1", "0.15.2", "2.0.2", "0.15.2", "0.6.1"),
    ],
)
def test_patch_and_rc_pairing(torch: str, vision: str, audio: str, text: str, data: str) -> None:
    paired = resolve_version(torch, load_catalog()).paired
    assert paired == {"torchvision": vision, "torchaudio": audio, "torchtext": text, "torchdata": data}


def test_torch_2_5_1_pairs_vision_0_20_1_and_audio_2_5_1() -> None:
    paired = resolve_version("2.5.1", load_catalog()).paired
    assert paired["torchvision"] == "0.20.1"
    assert paired["torchaudio"] == "2.5.1"


def test_a_minor_resolves_to_its_newest_patch() -> None:
    assert resolve_version("2.1", load_catalog()).torch_version == "2.1.2"


def test_torchtext_ends_with_0_18() -> None:
    catalog = load_catalog()
    assert catalog.libraries["torchtext"].last == "0.18"
    assert resolve_version("2.3.1", catalog).paired["torchtext"] == "0.18.0"
    for minor in ("2.4", "2.9", "2.14"):
        assert "torchtext" not in resolve_version(minor, catalog).paired


@pytest.mark.parametrize("spec", ["2.5.7", "3.0", "0.9", "2.5.1-rc1"])
def test_unknown_versions_are_rejected_not_guessed(spec: str) -> None:
    with pytest.raises(Unresolvable):
        resolve_version(spec, load_catalog())


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("nightly", "nightly"),
        ("main", "main"),
        ("a" * 40, "commit"),
        ("2.0.0-rc2", "rc"),
        ("2.5", "release"),
        ("release/2.6", "ref"),
        ("v2.6.0", "ref"),
    ],
)
def test_classify(spec: str, kind: str) -> None:
    assert classify(spec) == kind


def test_moving_refs_pair_with_the_same_branch() -> None:
    for name in ("nightly", "main"):
        resolved = resolve_version(name, load_catalog())
        assert resolved.paired and set(resolved.paired.values()) == {name}


def test_every_cuda_toolkit_named_by_a_release_exists_and_default_archs_are_valid() -> None:
    catalog = load_catalog()
    for release in catalog.releases:
        for cuda in release.all_cuda:
            if cuda not in catalog.cuda:  # learnt by the deployment (issue 64): never a repository row or lock
                assert Version(cuda).major >= 13, (release.torch, cuda)  # the watcher locks 13+ from PyPI only
                assert not list((ROOT / "buildspecs/images/scripts/cuda").glob(f"cuda-{cuda}-*.toml")), cuda
                continue
            toolkit = catalog.cuda[cuda]
            for arch in toolkit.default_arch_list.replace("+PTX", "").split(";"):
                assert arch in toolkit.archs, (cuda, arch)


def test_a_broken_catalog_edit_is_caught_by_the_loader() -> None:
    with pytest.raises(KeyError):
        catalog_from_text('schema = 1\n[libraries.torch]\nrepo = "x"\n')
