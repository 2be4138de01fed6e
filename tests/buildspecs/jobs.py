"""Real job contracts for the tests: requests planned by the Lambda side's own code.

Regenerate the golden stage listings after an intended change with:
    .venv/bin/python -m tests.buildspecs.jobs
"""

from __future__ import annotations

import shlex
from datetime import date
from pathlib import Path
from typing import Any

from wfbuild.stages.stages import render_stages
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.presets import load_preset
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
TODAY = date(2024, 11, 22)  # nightly versions carry the build date: fixed for reproducible listings

THREE_TARGETS = [
    {"platform": "x86_64", "accelerator": "cpu"},
    {"platform": "x86_64", "accelerator": "cuda", "cuda": "12.4", "arch_list": "8.0;8.6;9.0+PTX"},
    {"platform": "aarch64", "accelerator": "cpu", "mkldnn": True},
]
REQUESTS: dict[str, dict[str, Any]] = {
    "torch-2.5.1": {"version": "2.5.1", "python": ["3.11", "3.12"], "targets": THREE_TARGETS},
    "torch-1.13.1": {
        "version": "1.13.1",
        "python": ["3.10"],
        "targets": [
            {"platform": "x86_64", "accelerator": "cpu"},
            {"platform": "x86_64", "accelerator": "cuda", "cuda": "11.7", "arch_list": "7.0;8.0;8.6"},
            {"platform": "aarch64", "accelerator": "cpu"},
        ],
        "options": {"mpi": False},
    },
    # The newest catalog release, the three targets of its upstream build (CUDA 13.0: wheel-2.14.1).
    "torch-2.14.1": {
        "version": "2.14.1",
        "python": ["3.12"],
        "targets": [
            {"platform": "x86_64", "accelerator": "cpu"},
            {"platform": "x86_64", "accelerator": "cuda", "cuda": "13.0"},
            {"platform": "aarch64", "accelerator": "cpu", "mkldnn": True},
        ],
    },
    "nightly": load_preset("nightly"),
    "extension": {
        "framework": "extension",
        "name": "wf-example-ops",
        "source": {"git": "https://github.com/example/wf-example-ops", "ref": "v0.1.0", "subdirectory": "ext"},
        "torch": ["2.6", "2.13"],
        "cuda": ["cpu", "12.6"],
        "python": ["3.11"],
    },
}


def jobs(name: str) -> dict[str, dict[str, Any]]:
    """job id -> job contract (Job.to_dict()) for one named request."""
    plan = plan_request(parse_request(REQUESTS[name]), load_catalog(), load_config(), today=TODAY)
    return {job.id: job.to_dict() for job in plan.jobs}


def listing(job: dict[str, Any]) -> str:
    """The job's stages as text: what the golden files hold."""
    image = job["image"]
    out = [f"job {job['id']}", f"image {image['recipe']} FROM {image['base']} -> {image['manylinux']}"]
    for key, value in sorted(image["build_args"].items()):  # a multi-line value (CUDA_REQUIREMENTS): a line each
        out += (
            [f"  build-arg {key}={value}"]
            if "\n" not in value
            else [f"  build-arg {key}:", *(f"    {v}" for v in value.splitlines())]
        )
    out += [f"  env {k}={v}" for k, v in sorted(job["env"].items())]
    for pin in job.get("packages", []):  # each package's own switches (the runner layers them on job env)
        out += [f"  package {pin['name']} env {k}={v}" for k, v in sorted(pin.get("env", {}).items())]
    for stage in render_stages(job):
        flags = [f"package={stage.package}", f"python={stage.python}", f"fatal={stage.fatal}"]
        flags += ["host"] * stage.host + ["always"] * stage.always
        flags += [f"needs={','.join(stage.needs)}"] if stage.needs else []
        flags += [f"group={stage.group}"] if stage.group else []
        out.append(f"[{stage.name}] {' '.join(flags)}")
        out += [f"  env {k}={v}" for k, v in sorted(stage.env.items())]
        out.append(f"  argv {shlex.join(stage.argv)}")
    return "\n".join(out) + "\n"


def golden_files() -> dict[Path, str]:
    return {GOLDEN / f"{job_id}.txt": listing(job) for name in REQUESTS for job_id, job in jobs(name).items()}


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for stale in GOLDEN.glob("*.txt"):
        stale.unlink()
    for path, text in golden_files().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()


def plan_extension_job(
    name: str, source_s3: str, keep_on_failure: bool = False, build_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The job Validate would write for a one-cell extension request against this machine's torch."""
    raw: dict[str, Any] = {
        "framework": "extension",
        "name": name,
        "source": {"s3": source_s3},
        "torch": ["2.13"],
        "cuda": ["cpu"],
        "python": ["3.11"],
        "torch_index": "pip",  # this host's pip configuration: torch 2.13.0 from its local wheel
        "options": {"keep_on_failure": keep_on_failure},
        **({"build_env": build_env} if build_env else {}),
    }
    (job,) = plan_request(parse_request(raw), load_catalog(), load_config(), today=TODAY).jobs
    return job.to_dict()
