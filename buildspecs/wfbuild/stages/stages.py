"""The stages of a job: what runs, in which order, with which variables.

``render_stages(job)`` is pure: the CLI's ``plan --dry-run`` prints it and the runner executes it.
Paths are rendered for the place the stage runs (``/work`` and ``/bundle`` inside the builder
container; the host's directories in host mode). Every untrusted value is checked here (and again
by the scripts) and travels as an environment variable or an argv element, never inside a
shell string.

Layout under the work dir: ``src/<package>`` checkouts, ``envs/cpXY`` one build environment per
Python, ``dist/raw/<package>/cpXY`` what the build wrote, ``dist/wheels/<package>/cpXY`` repaired
and smoke-tested wheels, ``meta/`` commits, job.json and stage results, ``manifest.json``.
"""

from __future__ import annotations

from typing import Any

from wfbuild import safety
from wfbuild.stages.published_stages import published_stages
from wfbuild.stages.stage_base import CELL_TOOLS, Paths, Stage, cell_key, checkout, cp, source_stage, tool
from wfbuild.wheels import reproducible
from wfbuild.wheels.libs import CUDA_LIBS, DRIVER_LIBS, TORCH_LIBS, nvidia_rpaths

__all__ = ["CELL_TOOLS", "Stage", "cell_key", "cp", "render_stages"]  # what other modules import from here


def _compile_env(p: Paths, job: dict[str, Any], pin: dict[str, Any] | None) -> dict[str, str]:
    """CFLAGS, CXXFLAGS, NVCC_APPEND_FLAGS: the job's and the package's own, then the work folder mapped to
    ``.`` (wfbuild.wheels.reproducible), so no per-job folder reaches the binaries."""
    base = {**job["env"], **((pin or {}).get("env") or {})}
    return reproducible.flags_env([(p.work, ".")], base)


def _version_env(pin: dict[str, Any], job: dict[str, Any], variable: str) -> dict[str, str]:
    scheme = pin["version_scheme"]
    if scheme == "fixed":
        return {"WF_VERSION_SCHEME": "fixed", variable: str(pin["build_version"])}
    if scheme == "nightly":
        date = pin.get("env", {}).get("WF_BUILD_DATE", "")
        safety.check(safety.DATE, date, f"{pin['name']}.env.WF_BUILD_DATE")
        return {"WF_VERSION_SCHEME": "nightly", "WF_BUILD_DATE": date, "WF_VARIANT": job["variant"]}
    return {"WF_VERSION_SCHEME": "git"}


def _repair_args(job: dict[str, Any], torch: bool) -> list[str]:
    args = ["--plat", job["image"]["manylinux"]]
    cuda = job["accelerator"] == "cuda"
    # torch's libraries are never grafted: an extension or domain library takes them from the installed
    # torch, and inside the torch wheel itself they are already present (excluding them also spares
    # auditwheel a failed hunt for libc10.so on behalf of binaries whose RPATH misses torch/lib).
    excludes = list(TORCH_LIBS) + (list(CUDA_LIBS) if cuda else list(DRIVER_LIBS))
    for pattern in excludes:
        args += ["--exclude", pattern]
    if not torch:
        return [*args, "--slim"]  # an extension or domain library: checked to carry none of them
    expect = ["libgomp"]
    lib_paths = []
    if job["smoke"]["mpi"]:
        lib_paths.append("/opt/openmpi/lib")
        expect.append("libmpi")
    env = job["env"]
    if job["platform"] == "aarch64":
        lib_paths.append("/opt/OpenBLAS/lib")
        expect.append("libopenblas")
        if env.get("USE_MKLDNN_ACL") == "1":
            lib_paths.append("/acl/build")
            expect.append("libarm_compute")
    for path in lib_paths:
        args += ["--lib-path", path]
    for lib in expect:
        args += ["--expect-bundled", lib]
    for req in job["requirements"]:
        args += ["--require", req]
    for rpath in nvidia_rpaths(job["requirements"], job["cuda"]) if cuda else []:
        args += ["--rpath", rpath]
    return args


def _post(
    p: Paths, job: dict[str, Any], pkg: str, python: str, built: str, fatal: bool, cell: dict[str, Any] | None = None
) -> list[Stage]:
    """repair then smoke of one package for one Python (an extension: of one cell)."""
    torch = pkg == "torch" and job["kind"] == "pytorch"
    repair = _repair_args(job, torch)
    ext = job.get("extension") or {}
    raw, wheels, suffix, group = p.raw(pkg, python), p.wheels(pkg, python), f"{pkg}-{python}", None
    smoke_dir = f"{p.work}/smoke"
    if cell is not None:
        key = cell_key(cell)
        raw, wheels, suffix, group = f"{raw}/{key}", f"{wheels}/{key}", cell["id"], cell["id"]
        smoke_dir = f"{smoke_dir}/{cell['id']}"
        if ext.get("label_wheels", True):
            repair += ["--local-label", safety.check(safety.LABEL, cell["local_label"], "extension.cells.local_label")]
        if ext.get("abi") == "stable":  # one wheel for the range: torch>=its oldest, which the test jobs cover
            repair += ["--torch-floor", stable_floor(cell)]
        else:
            repair += ["--pin-torch", cell["torch_version"]]  # torch>=X.Y,<X.Y+1 in the bytes smoke and tests see
    smoke = ["--python", python, "--wheel-dir", wheels, "--work-dir", smoke_dir]
    needs: tuple[str, ...] = ()
    if torch:
        flags = job["smoke"]
        smoke += [f for f, on in (("--mpi", flags["mpi"]), ("--mkldnn", flags["mkldnn"])) if on]
        smoke += ["--cuda-built"] if flags["cuda_built"] else []
    elif job["kind"] == "pytorch":
        smoke += ["--torch-wheel-dir", p.wheels("torch", python)]
        needs = (f"smoke-torch-{python}",)
    else:
        smoke += ["--base-env", p.env(python) if cell is None else _cell_env(p, cell)]
        smoke += ["--cuda-built"] if job["smoke"]["cuda_built"] else []
        if ext.get("smoke_module"):
            smoke += ["--module", safety.check(safety.MODULE, ext["smoke_module"], "extension.smoke_module")]
    repair_stage = Stage(
        f"repair-{suffix}",
        tool("wheels.repair", "--in-dir", raw, "--out-dir", wheels, *repair),
        {},
        pkg,
        python,
        fatal,
        needs=(built,),
        group=group,
        offline=True,
    )
    smoke_stage = Stage(
        f"smoke-{suffix}",
        tool("stages.smoke", *smoke),
        {},
        pkg,
        python,
        fatal,
        needs=(repair_stage.name, *needs),
        group=group,
        offline=True,
    )
    return [repair_stage, smoke_stage]


def _cell_env(p: Paths, cell: dict[str, Any]) -> str:
    return f"{p.env(cell['python'])}-{cell_key(cell)}"


def _pytorch(p: Paths, job: dict[str, Any]) -> list[Stage]:
    pins = job["packages"]
    if not pins or pins[0]["name"] != "torch":
        raise safety.UnsafeValue("a pytorch job builds torch first")
    torch, libs = pins[0], pins[1:]
    stages = [checkout(p, pin["name"], pin["repo"], pin["ref"], pin is torch) for pin in pins]
    built: dict[tuple[str, str], str] = {}
    for python in torch["python"]:
        reqs = ["--requirements", f"{p.src('torch')}/requirements.txt", "--pip", "wheel", "--pip", "ninja"]
        env_argv = tool("envs", "--python", python, "--dest", p.env(python), *reqs)
        env_stage = Stage(f"env-{python}", env_argv, {}, "torch", python)
        build_env = {
            "WF_SRC_DIR": p.src("torch"),
            "WF_ENV_DIR": p.env(python),
            "WF_OUT_DIR": p.raw("torch", python),
            "WF_PYTHON_VERSION": python,
            **_version_env(torch, job, "PYTORCH_BUILD_VERSION"),
            **_compile_env(p, job, torch),
        }
        build = Stage(f"build-torch-{python}", p.script("build-torch.sh"), build_env, "torch", python)
        stages += [env_stage, build]
        built[("torch", python)] = build.name
    for python in torch["python"]:
        for pin in libs:
            if python not in pin["python"]:
                continue
            name = pin["name"]
            env = {
                "WF_SRC_DIR": p.src(name),
                "WF_ENV_DIR": p.env(python),
                "WF_OUT_DIR": p.raw(name, python),
                "WF_PYTHON_VERSION": python,
                "WF_TORCH_WHEEL_DIR": p.raw("torch", python),
                **_version_env(pin, job, "BUILD_VERSION"),
                **_compile_env(p, job, pin),
            }
            needs = (f"build-torch-{python}", f"checkout-{name}")
            stage = Stage(f"build-{name}-{python}", p.script("build-library.sh"), env, name, python, False, needs=needs)
            stages.append(stage)
            built[(name, python)] = stage.name
    for pin in pins:
        for python in pin["python"]:
            if (pin["name"], python) in built:
                stages += _post(p, job, pin["name"], python, built[(pin["name"], python)], pin is torch)
    return stages


def _extension(p: Paths, job: dict[str, Any]) -> list[Stage]:
    ext = job["extension"]
    name = safety.check(safety.NAME, ext["name"], "extension.name")
    source, src = source_stage(p, ext)
    index = []
    if ext.get("torch_index_url"):
        index = ["--index-url", safety.check(safety.URL, ext["torch_index_url"], "extension.torch_index_url")]
    stages = [source]
    for cell in ext["cells"]:
        python, key, cid = cell["python"], cell_key(cell), safety.check(safety.CELL, cell["id"], "extension.cells.id")
        torch = f"torch=={key.removeprefix('torch')}"
        tools = [arg for tool in CELL_TOOLS for arg in ("--pip", tool)]
        if job.get("cuda"):
            tools += ["--expect-cuda", safety.check(safety.CUDA, job["cuda"], "cuda")]
        env_dir = _cell_env(p, cell)
        env_argv = tool("envs", "--python", python, "--dest", env_dir, "--torch", torch, *index, *tools)
        env_stage = Stage(
            f"env-{cid}", env_argv, {}, name, python, fatal=False, needs=(source.name,), group=cid, shared_env=True
        )
        env = {"WF_SRC_DIR": src, "WF_ENV_DIR": env_dir, "WF_OUT_DIR": f"{p.raw(name, python)}/{key}"}
        # Each cell builds from its own copy: setuptools writes build/ and *.egg-info into the tree.
        env |= {"WF_PYTHON_VERSION": python, "WF_VERSION_SCHEME": "git", "WF_BUILD_COPY": f"{p.work}/cells/{cid}"}
        env |= _compile_env(p, job, next((pin for pin in job["packages"] if pin["name"] == name), None))
        build = Stage(
            f"build-{cid}", p.script("build-library.sh"), env, name, python, False, needs=(env_stage.name,), group=cid
        )
        abi = _abi(p, cell, name, src, build.name, job["extension"])
        stages += [env_stage, build, abi]
        # abi "stable": the reading is a gate, nothing of a refused cell is repaired, tested or published
        built = abi.name if job["extension"].get("abi") == "stable" else build.name
        if job.get("cuda"):  # the device code is read before anything of the cell is repaired, tested or published
            check = _device_code(p, job, cell, name, src, built)
            stages.append(check)
            built = check.name
        stages += _post(p, job, name, python, built, False, cell)
    return stages


def stable_floor(cell: dict[str, Any]) -> str:
    """A stable build cell's floor (X.Y): the oldest torch of the cells its wheel serves (the planner's ``floor``;
    without it, the cell's own torch), so the floor its files may have and the torch>= its wheel requires. A build
    against the range's newest torch (``abi_build: newest``) must set TORCH_TARGET_VERSION to reach it."""
    if cell.get("floor"):
        return safety.check(safety.MINOR, str(cell["floor"]), "extension.cells.floor")
    version = str(cell["torch_version"]).split("+")[0].split(".")
    return safety.check(safety.MINOR, ".".join(version[:2]), "extension.cells.torch_version")


def _abi(p: Paths, cell: dict[str, Any], name: str, src: str, built: str, ext: dict[str, Any]) -> Stage:
    """wfbuild.wheels.abi: what the cell's compiled files import (stable ABI or per-torch, the floor), recorded under
    meta/abi/ for the manifest. It refuses nothing, so the cell's later stages do not wait on it, unless the
    request says ``abi: stable``: then it refuses a per-torch file or a floor above the cell's torch, the oldest its
    wheel serves for its Python."""
    cid, key = cell["id"], cell_key(cell)
    argv = tool(
        "wheels.abi",
        *("--in-dir", f"{p.raw(name, cell['python'])}/{key}", "--cell", cid, "--torch-version", key[len("torch") :]),
        *("--env-dir", _cell_env(p, cell), "--out", f"{p.work}/meta/abi/{cid}.json", "--src", src),
    )
    if ext.get("abi") == "stable":  # refused unless stable, with a floor no newer than the oldest torch it serves
        argv += ["--require-stable", stable_floor(cell)]
    return Stage(f"abi-{cid}", argv, {}, name, cell["python"], False, needs=(built,), group=cid, offline=True)


def _device_code(p: Paths, job: dict[str, Any], cell: dict[str, Any], name: str, src: str, built: str) -> Stage:
    """wfbuild.cuda.devicecode for a CUDA cell: its record under meta/devicecode/, the cell refused without it."""
    cid, python = cell["id"], cell["python"]
    argv = tool(
        "cuda.devicecode",
        *("--in-dir", f"{p.raw(name, python)}/{cell_key(cell)}", "--cell", cid),
        *("--cuda", safety.check(safety.CUDA, job["cuda"], "cuda"), "--arch-list", job.get("arch_list") or ""),
        *("--out", f"{p.work}/meta/devicecode/{cid}.json", "--src", src),
    )
    return Stage(f"devicecode-{cid}", argv, {}, name, python, False, needs=(built,), group=cid, offline=True)


def render_stages(job: dict[str, Any], *, work_dir: str = "/work", bundle_dir: str = "/bundle") -> list[Stage]:
    """The job's stages in order; raises ``safety.UnsafeValue`` on a field the host refuses."""
    p = Paths(work_dir, bundle_dir)
    if job.get("arch_list"):
        safety.check(safety.ARCH_LIST, job["arch_list"], "arch_list")
    safety.check_env(dict(job["env"]), "job.env")
    for pin in job["packages"]:
        safety.check(safety.NAME, pin["name"], "package name")
        safety.check_env(dict(pin.get("env", {})), f"{pin['name']}.env")
    if job["kind"] == "pytorch":
        stages = _pytorch(p, job)
    elif job["kind"] == "extension":
        stages = _extension(p, job)
    elif job["kind"] == "test":
        stages = published_stages(p, job)
    else:
        raise safety.UnsafeValue(f"unknown job kind {job['kind']!r}")
    manifest = tool("runner.manifest", "--work-dir", p.work, "--out", f"{p.work}/manifest.json")
    stages.append(Stage("manifest", manifest, {}, always=True, fatal=False, offline=True))
    return stages
