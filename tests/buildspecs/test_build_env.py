"""A request's ``build_env``: the package's own build switches reach its setup.py in every cell; the
variables the farm sets itself, and values a shell or an env file could misread, are refused up front.

causal-conv1d 1.7.0's setup.py (PyPI sdist) fetches a prebuilt wheel from GitHub unless
CAUSAL_CONV1D_FORCE_BUILD=TRUE; torch-harmonics 0.8.1 compiles its CUDA kernels only with
FORCE_CUDA_EXTENSION=1. Without build_env neither could be built as its maintainer publishes it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.buildspecs.conftest import run
from tests.buildspecs.test_runner import Aws, aws, moto_endpoint, put_job, runner_env, tarball  # noqa: F401
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_ext"
REQUEST: dict[str, Any] = {
    "framework": "extension",
    "name": "causal-conv1d",
    "source": {"s3": "s3://bucket/sources/causal_conv1d-1.7.0.tar.gz"},
    "torch": ["2.14"],
    "cuda": ["13.0"],
    "python": ["3.11"],
}


def _env(raw: dict[str, Any]) -> dict[str, str]:
    (job,) = plan_request(parse_request(raw), load_catalog(), load_config()).jobs
    return dict(job.to_dict()["env"])


def test_the_packages_switches_reach_the_jobs_environment_beside_the_farms_own() -> None:
    switches = {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE", "FORCE_CUDA_EXTENSION": "1"}
    env = _env({**REQUEST, "build_env": switches})
    assert {k: env[k] for k in switches} == switches
    plain = _env(REQUEST)
    assert not set(switches) & set(plain)
    assert {k: v for k, v in env.items() if k not in switches} == plain  # the farm's variables unchanged
    assert parse_request({**REQUEST, "build_env": switches}).build_env == tuple(sorted(switches.items()))


@pytest.mark.parametrize(
    "name",
    ["MAX_JOBS", "TORCH_CUDA_ARCH_LIST", "NVCC_APPEND_FLAGS", "CUDA_HOME", "CFLAGS", "FORCE_CUDA", "LD_PRELOAD",
     "AWS_SECRET_ACCESS_KEY", "WF_NVCC_THREADS", "SCCACHE_BUCKET", "PATH", "BASH_ENV", "PYTHONPATH",
     "SOURCE_DATE_EPOCH"],
)  # fmt: skip
def test_a_variable_the_farm_sets_is_refused_naming_it(name: str) -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**REQUEST, "build_env": {"OTHER_SWITCH": "1", name: "x"}})
    text = str(caught.value)
    assert f"build_env.{name}: {name} is the farm's to set" in text, text
    assert "OTHER_SWITCH" not in text and "like CAUSAL_CONV1D_FORCE_BUILD" in text


@pytest.mark.parametrize(
    ("env", "where", "expected"),
    [
        ({"X": "a b"}, "build_env.X", "no spaces, quotes or shell characters"),
        ({"X": "$(id)"}, "build_env.X", "no spaces, quotes or shell characters"),
        ({"X": "a;b"}, "build_env.X", "no spaces, quotes or shell characters"),
        ({"X": "'q'"}, "build_env.X", "no spaces, quotes or shell characters"),
        ({"X": 1}, "build_env.X", "wrong type"),
        ({"lower": "1"}, "build_env", "an upper-case variable name"),
        ({"1X": "1"}, "build_env", "an upper-case variable name"),
    ],
)
def test_a_value_or_name_a_shell_or_env_file_could_misread_is_refused(
    env: dict[str, Any], where: str, expected: str
) -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**REQUEST, "build_env": env})
    text = str(caught.value)
    assert f"{where}: " in text and expected in text, text


@pytest.mark.heavy  # a real build through the runner: `make test-heavy`
def test_a_build_switch_reaches_the_packages_setup_py(aws: Aws, cache_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    """The tiny extension, its setup.py refusing to build (as causal-conv1d's would fetch a prebuilt
    wheel) unless TINY_EXT_FORCE_BUILD=TRUE: the request's build_env lets the cell build it."""
    tree = tmp_path / "src"
    shutil.copytree(TINY, tree)
    setup = tree / "setup.py"
    guard = 'import os\nif os.environ.get("TINY_EXT_FORCE_BUILD") != "TRUE":\n    raise SystemExit("no FORCE_BUILD")\n'
    setup.write_text(guard + setup.read_text())
    switch = {"TINY_EXT_FORCE_BUILD": "TRUE"}
    job, job_key = put_job(aws, "wf-tiny-ext", tarball(tree, "wf-tiny-ext-0.1.0"), build_env=switch)
    assert job["env"]["TINY_EXT_FORCE_BUILD"] == "TRUE"
    execution, token = aws.task_token()
    proc = run(
        [sys.executable, "-m", "wfbuild.runner.runner"], runner_env(aws, job_key, token, tmp_path / "work", cache_dir)
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    output = json.loads(aws.finished(execution)["output"])
    (wheel,) = output["wheels"]
    assert wheel["filename"].startswith("wf_tiny_ext-0.1.0+pt213cpu-cp311-cp311-manylinux")
    manifest = json.loads(aws.text(output["manifest_key"]))
    assert manifest["flags"]["job"]["TINY_EXT_FORCE_BUILD"] == "TRUE"  # recorded with the job's flags
