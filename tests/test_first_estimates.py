"""A first run's estimate scales with what the source holds (wheelfoundry.planning.source_profile + calibration
``profiled_work``): within 2x of the compile stages the benches measured, on the demo's source and the corpus.

The units of each corpus sdist (pinned by sha256 in examples/corpus/corpus.toml) were counted from its member
list; the measured compile stages are read from bench/results (cold compiler cache, 2 cores)."""

from __future__ import annotations

import io
import json
import statistics
import tarfile
from pathlib import Path

import pytest

from wheelfoundry.config import load_config
from wheelfoundry.planning.calibration import cell_cost
from wheelfoundry.planning.source_profile import SourceProfile, from_path, profile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CORPUS_UNITS = {  # C/C++ units, .cu units in the sdist
    "torchsort": (1, 1),
    "torch-spline-conv": (5, 2),
    "torch-cluster": (16, 7),
    "torch-harmonics": (7, 6),
    "torch-scatter": (7, 3),
    "quad-iou-fixed": (1, 1),
}
COLD = ("corpus-20261126T011944Z", "corpus-20261124T211145Z", "corpus-20261124T174859Z")  # empty compiler cache
CORES = 2


def predicted_seconds(units: SourceProfile, cuda: bool, archs: int) -> float:
    cost = cell_cost(cuda, archs, load_config(), profile=units)
    return cost.work * 3600 / min(units.units(cuda), CORES)


def cold_compiles() -> dict[str, float]:
    found: dict[str, list[float]] = {}
    for name in COLD:
        for package in json.loads((RESULTS / f"{name}.json").read_text())["packages"]:
            if package.get("compile_seconds"):
                found.setdefault(package["name"], []).append(float(package["compile_seconds"]))
    return {name: statistics.median(times) for name, times in found.items()}


@pytest.mark.parametrize("package", sorted(CORPUS_UNITS))
def test_a_corpus_packages_first_cpu_estimate_is_within_2x_of_its_cold_compile(package: str) -> None:
    actual = cold_compiles()[package]
    guess = predicted_seconds(SourceProfile(*CORPUS_UNITS[package]), cuda=False, archs=0)
    assert actual / 2 <= guess <= actual * 2, (package, guess, actual)


NVCC = {  # nvcc_threads results: the `--threads 1` row (what the fit's CUDA figures describe)
    "nvcc_threads-20261126T092147Z": (1, 1),  # examples/extension, 6 architectures
    "nvcc_threads-20261126T094131Z": (1, 1),
    "nvcc_threads-20261126T111345Z": (1, 1),  # examples/extension, 2 architectures
    "nvcc_threads-20261126T123826Z": (7, 3),  # torch-scatter 2.1.2, 2 architectures
    "nvcc_threads-20261126T140306Z": (7, 3),  # torch-scatter 2.1.2, 6 architectures
    "nvcc_threads-20261126T225437Z": (1, 3),  # causal-conv1d 1.7.0 (9 architectures whatever the list)
}


@pytest.mark.parametrize("result", sorted(NVCC))
def test_a_first_cuda_estimate_is_within_2x_of_the_measured_build(result: str) -> None:
    data = json.loads((RESULTS / f"{result}.json").read_text())
    off = next(r for r in data["rows"] if "--threads 1" in r["parallelism"] and "per step" not in r["parallelism"])
    archs = 9 if data["package"] == "causal-conv1d" else len(data["arch_list"].split(";"))
    guess = predicted_seconds(SourceProfile(*NVCC[result]), cuda=True, archs=archs)
    actual = float(off["compile_seconds"])
    assert actual / 2 <= guess <= actual * 2, (result, guess, actual)


def test_the_demos_source_is_profiled_from_its_folder() -> None:
    # The demo's own build stage has no result file under bench/results: the report gives it from `make demo`.
    assert from_path(ROOT / "examples" / "extension") == SourceProfile(cpp_units=1, cu_units=1)


def test_an_sdists_units_are_counted_from_its_member_list_and_tests_are_left_out(tmp_path: Path) -> None:
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in ("pkg-1.0/csrc/a.cpp", "pkg-1.0/csrc/b.cu", "pkg-1.0/csrc/c.CC", "pkg-1.0/tests/t.cpp"):
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))
    assert from_path(sdist) == SourceProfile(cpp_units=2, cu_units=1)
    assert profile(["x/benchmarks/b.cu", "y.c", "z.h"]) == SourceProfile(1, 0)
    with pytest.raises(ValueError, match="expected a source folder or an sdist"):
        from_path(tmp_path / "missing")


def test_a_recorded_source_is_planned_by_its_record_not_its_units() -> None:
    config = load_config()
    record = {"cells": [{"cuda": False, "archs": 0, "compile_core_hours": 0.5, "serial_hours": 0.01}]}
    recorded = cell_cost(False, 0, config, record, SourceProfile(1, 0))
    assert recorded.source.startswith("1 recorded CPU cell") and recorded.work == pytest.approx(0.5)
    assert cell_cost(False, 0, config).source == "catalog model"
