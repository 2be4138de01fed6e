"""The corpus's pins, requests and harness pieces (the builds themselves run in `make corpus`)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from tools.corpus_steps import (
    CORPUS_DIR,
    TORCH,
    CorpusError,
    first_error,
    layout_of,
    load_corpus,
    restore_compiler_cache,
    save_compiler_cache,
)
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.catalog.resolve import resolve_version
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

CORPUS = CORPUS_DIR / "corpus.toml"


def test_the_corpus_covers_every_loading_pattern_both_ninja_settings_and_only_permissive_licences() -> None:
    packages = load_corpus(CORPUS)
    assert len(packages) >= 5
    assert len({p.sha256 for p in packages}) == len(packages)
    covered = {kind for p in packages for kind in p.loading}
    assert {"module", "pathfinder", "top-level", "libs"} <= covered
    assert {p.ninja for p in packages} == {True, False}
    assert {p.license for p in packages} <= {"MIT", "BSD-3-Clause", "BSD-2-Clause", "Apache-2.0"}
    in_ci = [p for p in packages if p.ci]  # issue 28: at least five build in CI and cover every pattern
    assert len(in_ci) >= 5 and {kind for p in in_ci for kind in p.loading} == covered
    assert {p.ninja for p in in_ci} == {True, False}


@pytest.mark.parametrize("package", load_corpus(CORPUS), ids=lambda p: p.name)
def test_each_request_plans_the_cells_the_harness_and_the_gpu_run_expect(package: object) -> None:
    from tools.corpus_steps import Package

    assert isinstance(package, Package)
    catalog, config = load_catalog(), load_config()
    cpu = json.loads(package.request("cpu").read_text())
    assert (cpu["name"], cpu["torch"], cpu["cuda"], cpu["python"]) == (package.name, ["2.13"], ["cpu"], ["3.11"])
    assert resolve_version(cpu["torch"][0], catalog).torch_version == TORCH  # the user venv's torch
    gpu = json.loads(package.request("cu130").read_text())
    assert (gpu["name"], gpu["torch"], gpu["cuda"], gpu["python"]) == (package.name, ["2.11"], ["13.0"], ["3.12"])
    assert gpu["arch_list"] == "9.0"
    for raw in (cpu, gpu):
        (job,) = plan_request(parse_request(raw), catalog, config).jobs
        assert job.kind == "extension"


def test_torch_harmonics_cuda_requests_come_with_and_without_its_own_switch() -> None:
    (harmonics,) = [p for p in load_corpus(CORPUS) if p.name == "torch-harmonics"]
    assert harmonics.cuda_switch == "FORCE_CUDA_EXTENSION"
    plain, switched = (json.loads(harmonics.request(k).read_text()) for k in ("cu130", "cu130-switch"))
    assert "build_env" not in plain and switched["build_env"] == {"FORCE_CUDA_EXTENSION": "1"}
    catalog, config = load_catalog(), load_config()
    (job,) = plan_request(parse_request(switched), catalog, config).jobs
    assert job.env["FORCE_CUDA_EXTENSION"] == "1" and job.arch_list == "9.0"


def test_a_switch_request_that_does_not_set_the_switch_is_refused(tmp_path: Path) -> None:
    text = CORPUS.read_text().replace('cuda_switch = "FORCE_CUDA_EXTENSION"', 'cuda_switch = "OTHER_SWITCH"')
    (tmp_path / "corpus.toml").write_text(text)
    with pytest.raises(CorpusError, match=r"cuda_switch = 'OTHER_SWITCH' must be set in build_env"):
        load_corpus(tmp_path / "corpus.toml")


def test_a_wrong_pin_is_refused_naming_the_package_field_and_value(tmp_path: Path) -> None:
    text = CORPUS.read_text()
    bad = text.replace('sha256 = "416a7dd2', 'sha256 = "XYZ7dd2', 1)
    assert bad != text
    (tmp_path / "corpus.toml").write_text(bad)
    with pytest.raises(CorpusError, match=r"package 'torchsort': sha256 = 'XYZ7dd2"):
        load_corpus(tmp_path / "corpus.toml")
    (tmp_path / "corpus.toml").write_text(text.replace('loading = ["module"]', 'loading = ["magic"]', 1))
    with pytest.raises(CorpusError, match=r"loading = \['magic'\]; allowed: module, pathfinder"):
        load_corpus(tmp_path / "corpus.toml")


def test_the_first_error_is_the_line_a_user_needs() -> None:
    log = "Traceback (most recent call last):\n  File x\nImportError: Could not find module '_version_cpu' in /s\n"
    assert first_error(log) == "ImportError: Could not find module '_version_cpu' in /s"
    assert first_error("ok   a\nFAIL check_knn: AssertionError: x\n1 of 2 checks passed") == (
        "FAIL check_knn: AssertionError: x"
    )
    assert first_error("") == "exit status non-zero, no output"


def test_the_layout_is_the_runs_own_word_else_marked_as_the_requests() -> None:
    assert layout_of({"layout": "per-cell", "layout_reason": "import failed"}, {}, "auto") == (
        "per-cell",
        "import failed",
    )
    assert layout_of({}, {"layout": {"chosen": "merged", "reason": "served"}}, "auto") == ("merged", "served")
    chosen, why = layout_of({}, {}, "merged")
    assert chosen == "merged?" and "reports no layout" in why


@mock_aws
def test_the_compiler_cache_outlives_the_emulated_stack_for_the_next_run(tmp_path: Path) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="first")
    s3.put_object(Bucket="first", Key="sccache/ext-aaa-cpu-x86_64/a/b/abcdef", Body=b"object code")
    s3.put_object(Bucket="first", Key="sccache/ext-aaa-cpu-x86_64/../../escape", Body=b"never written outside")
    s3.put_object(Bucket="first", Key="sccache/ext-other-cpu-x86_64/a/b/c", Body=b"another package's")
    folder = tmp_path / "corpus-sccache" / "torchsort"
    assert save_compiler_cache(s3, "first", "sccache/ext-aaa-", folder) == 1
    assert save_compiler_cache(s3, "first", "sccache/ext-aaa-", folder) == 0  # already there: nothing copied twice
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "corpus-sccache/torchsort/cpu-x86_64/a/b/abcdef"
    ]
    s3.create_bucket(Bucket="second")  # the next run's fresh stack, where the source's scope is another
    assert restore_compiler_cache(s3, "second", "sccache/ext-bbb-", folder) == 1
    body = s3.get_object(Bucket="second", Key="sccache/ext-bbb-cpu-x86_64/a/b/abcdef")["Body"].read()
    assert body == b"object code"
    assert restore_compiler_cache(s3, "second", "sccache/ext-bbb-", tmp_path / "none") == 0


@pytest.mark.parametrize(
    ("kind", "succeeded", "error", "expected"),
    [
        ("cu130", False, "job devicecode-x: DEVICE CODE REFUSED: cell x: no compiled file holds device code", "passed"),
        ("cu130", True, "", "failed"),  # published without its switch: the check let a CPU build through
        ("cu130", False, "job build-x: error: nvcc died", "failed"),  # refused, but not for its device code
        ("cu130-switch", True, "", "passed"),
        ("cu130-switch", False, "job devicecode-x: DEVICE CODE REFUSED: no code for 9.0", "failed"),
    ],
)
def test_the_cuda_pair_passes_when_the_farm_refuses_without_the_switch_and_publishes_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str, succeeded: bool, error: str, expected: str
) -> None:
    import tools.corpus as corpus
    import wheelfoundry_local.demo as demo

    class Result:
        arn, output = "arn:aws:states:us-east-1:1:execution:wf:run-1", {"channel": "c"}

    Result.succeeded = succeeded  # type: ignore[attr-defined]
    seen: list[str] = []
    monkeypatch.setattr(corpus, "fetch_sdist", lambda package, cache: tmp_path / "sdist.tar.gz")
    monkeypatch.setattr(corpus, "build_facts", lambda *a: None)
    monkeypatch.setattr(corpus, "build_error", lambda *a: error)
    monkeypatch.setattr(demo, "upload_source", lambda *a: "s3://b/sources/x.tar.gz")
    monkeypatch.setattr(
        demo, "run_request", lambda aws, stack, request, *a: seen.append(request["channel"]) or Result()
    )
    monkeypatch.setattr(demo, "show_device_code", lambda *a: None)
    monkeypatch.setattr(demo, "explain_failure", lambda *a, **k: None)
    (harmonics,) = [p for p in load_corpus(CORPUS) if p.name == "torch-harmonics"]

    class Aws:
        def client(self, name: str) -> object:
            return object()

    stack = type("Stack", (), {"outputs": {"WheelBucketName": "b"}})()
    outcome = corpus.run_cuda(Aws(), stack, harmonics, kind, tmp_path, tmp_path, 60)
    assert outcome.result == expected, outcome
    assert outcome.name == f"torch-harmonics ({kind})" and seen == [
        json.loads(harmonics.request(kind).read_text())["channel"]
    ]
    if kind == "cu130" and succeeded:
        assert "published without FORCE_CUDA_EXTENSION" in outcome.error


def test_packages_built_at_once_lead_each_line_with_their_name_and_jobs_below_one_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tools.corpus import main, speaker

    speaker("torch-scatter", lead=True)("\n== torch-scatter 2.1.2\n  3 of 3 checks passed")
    speaker("torchsort", lead=False)("started run-1")
    assert (
        capsys.readouterr().out
        == "\n[torch-scatter] == torch-scatter 2.1.2\n[torch-scatter]   3 of 3 checks passed\nstarted run-1\n"
    )
    with pytest.raises(SystemExit) as refused:
        main(["--jobs", "0"])
    assert refused.value.code == 2 and "--jobs 0: at least 1 package at a time" in capsys.readouterr().err


def test_the_corpus_lists_its_longest_build_first() -> None:
    """Two packages build at once in the corpus's order: the longest (torch-scatter, about 300 compile-s on 2
    cores, bench/results/corpus-*.json) first, so it does not start after two others."""
    ci = [p.name for p in load_corpus(CORPUS) if p.ci]
    assert ci[0] == "torch-scatter", ci
