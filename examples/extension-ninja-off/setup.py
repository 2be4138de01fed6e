"""wf-segops: segment reductions, built as the PyG packages build theirs.

One Extension of several translation units, each including torch's headers, and
``BuildExtension.with_options(use_ninja=False)``: setuptools compiles the units one at a time unless
the builder parallelizes them (WheelFoundry does: buildspecs/wfbuild/compiling/parallel_compile.py).
bench/parallel_compile.py builds it serially and in parallel.
Build against the torch already installed:  pip install --no-build-isolation ./examples/extension-ninja-off
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

SOURCES = ["csrc/module.cpp", "csrc/segment_sum.cpp", "csrc/segment_max.cpp", "csrc/segment_mean.cpp"]

setup(
    name="wf-segops",
    version="0.1.0",
    packages=["wf_segops"],
    ext_modules=[CppExtension("wf_segops._C", SOURCES, extra_compile_args=["-O2", "-g0"])],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    install_requires=["torch"],
    python_requires=">=3.9",
)
