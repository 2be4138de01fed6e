"""Issue 31: `plan` estimates each merged wheel's size per Python (from the arch list, or measured from an
earlier run's merged wheels) and warns where it would exceed the publish target's per-file limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from wheelfoundry_cli.wheel_sizes import estimate, measured_cells, warnings

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.planning.wheel_size import CUDA_BYTES_PER_ARCH
from wheelfoundry.request.publish_targets import PublishTarget
from wheelfoundry.request.request import parse_request

REQUEST = {
    "framework": "extension",
    "name": "wf-example-ops",
    "source": {"s3": "s3://bucket/sources/x.tar.gz"},
    "torch": ["2.12", "2.13"],
    "cuda": ["cpu", "12.6", "13.0"],
    "python": ["3.11", "3.12"],
    "platforms": ["x86_64"],
    "arch_list": "7.5;8.0;8.6;8.9;9.0+PTX",
    "channel": "demo",
}


def plan(request: dict[str, object]):  # type: ignore[no-untyped-def]
    catalog, config = load_catalog(), load_config()
    return plan_request(parse_request(request, catalog, config), catalog, config)


def merged_wheel(path: Path, builds: dict[str, int]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for build, size in builds.items():
            archive.writestr(f"wf_example_ops.wfbuilds/{build}/wf_example_ops/_C.so", os.urandom(size))
        archive.writestr("wf_example_ops/__init__.py", b"")
    return path


def test_one_estimate_per_python_from_the_arch_list_and_a_warning_over_pypi_limit() -> None:
    jobs = plan(REQUEST).jobs
    sizes = estimate(jobs)
    assert [(e.python, e.platform, e.cells) for e in sizes] == [("3.11", "x86_64", 6), ("3.12", "x86_64", 6)]
    # 4 CUDA cells x (5 archs + 1 PTX) x the per-arch size, plus 2 CPU cells
    assert sizes[0].size == 4 * 6 * CUDA_BYTES_PER_ARCH + 2 * 1_000_000
    warned = warnings(sizes, PublishTarget("pypi"))
    assert len(warned) == 2 and "would exceed pypi's per-file limit of 100 MB" in warned[0]
    assert "public channel" in warned[0] and "fewer archs" in warned[0]
    assert warnings(sizes, PublishTarget("pypi", max_file_mb=400)) == []  # a project with a raised limit
    assert estimate(plan({**REQUEST, "layout": "per-cell"}).jobs) == []  # no merged wheel, nothing to add up


def test_measured_cells_from_an_earlier_run_replace_the_model(tmp_path: Path) -> None:
    request = {k: v for k, v in REQUEST.items() if k != "arch_list"}
    jobs = plan({**request, "cuda": ["cpu"], "python": ["3.12"]}).jobs
    known = measured_cells([merged_wheel(tmp_path / "a.whl", {"torch2.13-cpu": 3000, "torch2.12-cpu": 2000})])
    assert known == {"torch2.13-cpu": 3000, "torch2.12-cpu": 2000}  # stored: compressed size == size
    (size,) = estimate(jobs, known)
    assert (size.measured, size.cells, size.size) == (2, 2, 5000)
    (modelled,) = estimate(jobs, {"torch2.13-cpu": 3000})
    assert (modelled.measured, modelled.size) == (1, 3000 + 1_000_000)


def test_plan_prints_the_sizes_and_the_warning(tmp_path: Path) -> None:
    request = tmp_path / "r.json"
    request.write_text(json.dumps({**REQUEST, "options": {"publish": "testpypi"}}))
    done = subprocess.run(
        [sys.executable, "-m", "wheelfoundry_cli.main", "plan", str(request)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (
        "merged wheels (estimated size):\n  Python 3.11 x86_64: ~146 MB (6 cell(s): 0 measured, 6 modelled)"
        in done.stdout
    )
    assert (
        "warning: Python 3.12 x86_64: ~146 MB" in done.stdout and "testpypi's per-file limit of 100 MB" in done.stdout
    )
