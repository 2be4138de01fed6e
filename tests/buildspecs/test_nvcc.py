"""wfbuild.compiling.nvcc: per-file nvcc flags, and the lock's nvcc 13.0 giving the same object from two folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.buildspecs.jobs import ROOT, TODAY
from wfbuild.compiling import cuda_home, nvcc
from wfbuild.cuda import toolkit
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

KERNEL = """namespace {
__global__ void twice(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
}  // namespace
void launch(float* x, int n) { twice<<<(n + 255) / 256, 256>>>(x, n); }
"""


def test_the_flags_follow_the_path_under_the_source_root_not_the_folder(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "src", tmp_path / "b" / "deeper" / "src"
    for root in (one, two):
        (root / "csrc").mkdir(parents=True)
        (root / "csrc" / "k.cu").write_text(KERNEL)
        (root / "csrc" / "m.cu").write_text(KERNEL)
    flags = nvcc.per_file_nvcc_flags(str(one / "csrc" / "k.cu"), str(one))
    assert flags == nvcc.per_file_nvcc_flags(str(two / "csrc" / "k.cu"), str(two))
    assert flags[1:] == ["-Xcudafe", "--orig_src_path_name=csrc/k.cu", "-Xcicc", "--orig_src_path_name=csrc/k.cu"]
    other = nvcc.per_file_nvcc_flags(str(one / "csrc" / "m.cu"), str(one))
    assert other[0] != flags[0] and other[0].startswith("-frandom-seed=")  # nvcc: a seed per file
    # through a symlink, as nvcc sees it (it resolves its input)
    (tmp_path / "link").symlink_to(one)
    assert nvcc.per_file_nvcc_flags(str(tmp_path / "link" / "csrc" / "k.cu"), str(one)) == flags
    # outside the root: its real path (deterministic only where that path is, e.g. /work in the container)
    assert nvcc.per_file_nvcc_flags(str(two / "csrc" / "k.cu"), str(one))[2].endswith(str(two / "csrc" / "k.cu"))
    # a path nvcc would split at its comma gets a digest's name, still per file
    (one / "a,b.cu").write_text(KERNEL)
    odd = nvcc.per_file_nvcc_flags(str(one / "a,b.cu"), str(one))
    assert odd[2].startswith("--orig_src_path_name=wf-") and "," not in odd[2]


def test_only_a_compile_of_one_cu_file_gets_them(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    cu, env = str(tmp_path / "k.cu"), {"WF_SRC_DIR": str(tmp_path)}
    argv = ["sccache", "/cuda/bin/nvcc", "-O2", "-c", cu, "-o", "k.o"]
    assert nvcc.command(argv, env) == [*argv, *nvcc.per_file_nvcc_flags(cu, str(tmp_path))]
    for untouched in (["nvcc", "--version"], ["nvcc", "-shared", "k.o", "-o", "k.so"], ["nvcc", "-E", cu]):
        assert nvcc.command(untouched, env) == untouched


def test_the_launcher_passes_the_flags_and_zeroes_the_pid_of_nvccs_intermediates(tmp_path: Path) -> None:
    """A stand-in nvcc that records its arguments and writes an object naming a tmpxft intermediate."""
    fake = tmp_path / "nvcc"
    fake.write_text(
        '#!/bin/sh\nprintf \'%s\\n\' "$@" > "$ARGS"\n'
        'while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        'printf \'ELF..tmpxft_00003a7f_00000000-6_k.cudafe1.cpp..\' > "$out"\nexit "${CODE:-0}"\n'
    )
    fake.chmod(0o755)
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text(KERNEL)
    env = {
        **os.environ,
        "ARGS": str(tmp_path / "args"),
        "WF_SRC_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT / "buildspecs"),
    }
    argv = [
        sys.executable,
        "-m",
        "wfbuild.compiling.nvcc",
        str(fake),
        "-c",
        str(tmp_path / "csrc" / "k.cu"),
        "-o",
        "k.o",
    ]
    assert subprocess.run(argv, cwd=tmp_path, env=env, check=False).returncode == 0
    assert (tmp_path / "k.o").read_bytes() == b"ELF..tmpxft_00000000_00000000-6_k.cudafe1.cpp.."
    passed = (tmp_path / "args").read_text().split("\n")
    assert "-Xcicc" in passed and "--orig_src_path_name=csrc/k.cu" in passed
    # a failed compile: its exit status, and nothing rewritten
    assert subprocess.run(argv, cwd=tmp_path, env={**env, "CODE": "3"}, check=False).returncode == 3
    assert b"tmpxft_00003a7f_" in (tmp_path / "k.o").read_bytes()


def _toolkit(root: Path) -> Path:
    """A stand-in toolkit: bin/nvcc records its arguments, include/ and lib64/ hold a file each."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "cuda.h").write_text("/* cuda */\n")
    (root / "lib64").mkdir()
    fake = root / "bin" / "nvcc"
    fake.write_text('#!/bin/sh\nprintf \'%s\\n\' "$@" > "$ARGS"\n')
    fake.chmod(0o755)
    (root / "bin" / "ptxas").write_text("#!/bin/sh\n")
    return root


def test_a_build_that_runs_cuda_homes_nvcc_itself_gets_the_launcher_too(tmp_path: Path) -> None:
    """BuildExtension without ninja runs os.path.join(CUDA_HOME, "bin", "nvcc"): the shim's nvcc is the launcher."""
    real = _toolkit(tmp_path / "cuda-13.0")
    homes = tmp_path / "cache" / "cuda-homes"
    home = cuda_home.make(real, sys.executable, str(real / "bin" / "nvcc"), homes)
    assert cuda_home.make(real, sys.executable, str(real / "bin" / "nvcc"), homes) == home  # made once, then reused
    assert home.parent == homes and (home / "include" / "cuda.h").read_text() == "/* cuda */\n"
    assert (home / "lib64").resolve() == real / "lib64" and (home / "bin" / "ptxas").resolve() == real / "bin" / "ptxas"
    for folder in ("one", "elsewhere/two"):  # two job folders: one shim, the same flags
        src = tmp_path / folder / "src"
        (src / "csrc").mkdir(parents=True)
        (src / "csrc" / "k.cu").write_text(KERNEL)
        env = {"PATH": "/usr/bin:/bin", "ARGS": str(tmp_path / "args"), "WF_SRC_DIR": str(src)}
        argv = [str(home / "bin" / "nvcc"), "-c", str(src / "csrc" / "k.cu"), "-o", str(src / "k.o")]
        assert subprocess.run(argv, env=env, check=False).returncode == 0
        passed = (tmp_path / "args").read_text().split("\n")
        assert passed[:2] == ["-c", str(src / "csrc" / "k.cu")]
        assert "--orig_src_path_name=csrc/k.cu" in passed and any(a.startswith("-frandom-seed=") for a in passed)
    version = [str(home / "bin" / "nvcc"), "--version"]
    assert subprocess.run(version, env=env, check=False).returncode == 0
    assert (tmp_path / "args").read_text().split("\n")[:1] == ["--version"]  # anything else passes through
    # sccache's command in front of nvcc is another shim: the compiler cache key never mixes the two
    other = cuda_home.make(real, sys.executable, f"/opt/sccache {real}/bin/nvcc", homes)
    assert other != home and f"exec {sys.executable}" in (other / "bin" / "nvcc").read_text()
    assert "/opt/sccache" in (other / "bin" / "nvcc").read_text()
    with pytest.raises(FileNotFoundError, match="not a CUDA toolkit"):
        cuda_home.make(tmp_path / "cache", sys.executable, "nvcc", homes)


@pytest.fixture(scope="module")
def locked_nvcc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nvcc 13.0 from the repository's lock, installed as the runner installs it for a CUDA 13.0 cell."""
    raw = {"framework": "extension", "name": "k", "source": {"s3": "s3://my-bucket/sources/k.tar.gz"}, "torch": ["2.14"],
           "cuda": ["13.0"], "python": ["3.11"], "arch_list": "9.0", "torch_index": "pip"}  # fmt: skip
    (job,) = plan_request(parse_request(raw), load_catalog(), load_config(), today=TODAY).jobs
    spec = job.to_dict()
    cache = Path(os.environ.get("WF_CACHE_DIR") or tmp_path_factory.mktemp("cache"))
    home = toolkit.ensure(ROOT / "buildspecs", "13.0", spec["platform"], toolkit.requirements_of(spec), cache)
    return home / "bin" / "nvcc"


def _compile(compiler: Path, root: Path, launcher: bool, threads: str = "") -> bytes:
    (root / "csrc").mkdir(parents=True, exist_ok=True)
    (root / "csrc" / "k.cu").write_text(KERNEL)
    argv = [str(compiler), "-c", "-O2", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_90,code=sm_90"]
    argv += ["-gencode", "arch=compute_80,code=sm_80"] if threads else []
    argv += [str(root / "csrc" / "k.cu"), "-o", str(root / "k.o")]
    if launcher:
        argv = [sys.executable, "-m", "wfbuild.compiling.nvcc", *argv]
    env = {"PATH": f"{compiler.parent}:/usr/bin:/bin", "WF_SRC_DIR": str(root), "PYTHONPATH": str(ROOT / "buildspecs")}
    env |= {"NVCC_APPEND_FLAGS": f"--threads {threads}"} if threads else {}
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return (root / "k.o").read_bytes()


@pytest.mark.heavy  # installs the CUDA 13.0 lock and compiles four times
@pytest.mark.timeout(900)
def test_the_locked_nvcc_compiles_an_anonymous_namespace_kernel_to_one_object_from_two_folders(
    locked_nvcc: Path, tmp_path: Path
) -> None:
    assert shutil.which("c++"), "nvcc needs a host compiler"
    plain = [_compile(locked_nvcc, tmp_path / f"plain{i}" / "src", False) for i in (1, 2)]
    assert plain[0] != plain[1], "plain nvcc gave one object from two folders: nothing to fix, the test proves nothing"
    assert b"_GLOBAL__N__" in plain[0] and b"tmpxft_" in plain[0]
    # two architectures, compiled one at a time in one folder and two at a time (nvcc --threads) in another
    one = _compile(locked_nvcc, tmp_path / "a" / "src", True, threads="1")
    two = _compile(locked_nvcc, tmp_path / "elsewhere" / "b" / "src", True, threads="2")
    assert one == two


CMAKE_PROJECT = """cmake_minimum_required(VERSION 3.18)
project(k LANGUAGES CXX CUDA)
set(CMAKE_CUDA_ARCHITECTURES 90)
add_library(k SHARED csrc/k.cu)
"""


# How a setup.py that runs cmake names the CUDA compiler: not at all (CMake reads CUDACXX), by
# torch.utils.cpp_extension's CUDA_HOME (from the environment), or by the nvcc that PATH finds.
COMPILER_NAMING = {
    "cudacxx": "",
    "cuda-home": '-DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc"',
    "path": '-DCMAKE_CUDA_COMPILER="$(command -v nvcc)"',
}


def _cmake_build(home: Path, root: Path, launcher: bool, cache: Path, naming: str = "cudacxx") -> bytes:
    """A CMake project's CUDA library, configured and built in ``root`` the way a stage does it: lib.sh's
    wf_nvcc_launcher first (CUDA_HOME, CUDACXX and PATH as the runner sets them for the toolkit), then
    cmake, naming its compiler as ``COMPILER_NAMING[naming]`` says."""
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "k.cu").write_text(KERNEL)
    (root / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    env = toolkit.stage_env({"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(root)}, home)
    env |= {"WF_SRC_DIR": str(root), "PYTHONPATH": str(ROOT / "buildspecs"), "WF_CACHE_DIR": str(cache)}
    env |= {"WF_NVCC_LAUNCHER": "on" if launcher else "off"}
    unset = "unset CUDACXX; " if naming != "cudacxx" else ""
    configure = f"cmake -S . -B build {COMPILER_NAMING[naming]}"
    script = f'source "{ROOT}/buildspecs/stages/lib.sh"; wf_nvcc_launcher; {unset}{configure} && cmake --build build'
    done = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return (root / "build" / "libk.so").read_bytes()


@pytest.mark.heavy  # installs the CUDA 13.0 lock and configures and builds a CMake project four times
@pytest.mark.timeout(900)
@pytest.mark.parametrize("naming", sorted(COMPILER_NAMING))
def test_a_cmake_built_cuda_library_is_the_same_from_two_folders_however_cmake_finds_nvcc(
    locked_nvcc: Path, tmp_path: Path, naming: str
) -> None:
    """CMake's CUDA language runs $CUDACXX or the compiler a project names, not PYTORCH_NVCC: wf_nvcc_launcher
    points CUDACXX, CUDA_HOME/bin/nvcc and the first nvcc on PATH at the shim's nvcc."""
    assert shutil.which("cmake", path=f"{Path(sys.executable).parent}:/usr/bin:/bin"), "the dev venv's cmake"
    home, cache = locked_nvcc.parent.parent, tmp_path / "cache"  # one build cache, as on one build host
    plain = [_cmake_build(home, tmp_path / f"plain{i}" / "src", False, cache, naming) for i in (1, 2)]
    assert plain[0] != plain[1], "plain nvcc gave one library from two folders: nothing to fix, the test proves nothing"
    ours = [_cmake_build(home, tmp_path / where / "src", True, cache, naming) for where in ("a", "else/b")]
    assert ours[0] == ours[1]
