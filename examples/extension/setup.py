"""Build script for wf-example-ops: C++ operators, plus CUDA kernels for CUDA builds.

Build it against the torch already in the environment (no isolated build env, which would
download another torch):  pip install --no-build-isolation ./examples/extension
FORCE_CUDA=1 (what a WheelFoundry CUDA cell sets) adds the CUDA kernels; that needs a CUDA build of
torch and the CUDA toolkit (nvcc), not a GPU. TORCH_CUDA_ARCH_LIST picks the GPU architectures.
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

if os.environ.get("FORCE_CUDA") == "1":
    extension = CUDAExtension(
        "wf_example_ops._C",
        ["csrc/ops.cpp", "csrc/ops_cuda.cu"],
        extra_compile_args={"cxx": ["-O2", "-g0"], "nvcc": ["-O2"]},
        libraries=["cublas"],  # matmul calls cuBLAS directly (through torch's handle)
    )
else:
    extension = CppExtension("wf_example_ops._C", ["csrc/ops.cpp"], extra_compile_args=["-O2", "-g0"])

setup(ext_modules=[extension], cmdclass={"build_ext": BuildExtension})
