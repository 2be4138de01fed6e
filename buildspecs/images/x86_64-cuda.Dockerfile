# Builder for x86_64 CUDA wheels: the pinned manylinux_2_28 base + a CUDA toolkit assembled from the
# job's lock (scripts/cuda/cuda-<CUDA_VERSION>-x86_64.toml: NVIDIA's redist archives and nvidia-* wheels,
# every file checked against its published sha256; no GPU needed to compile) + MKL + Open MPI
# (CUDA-aware) + sccache + the tools venv. No base image whose digest cannot be known.
ARG BASE_IMAGE=quay.io/pypa/manylinux_2_28_x86_64@sha256:39df0042d5cc900b085aa25a0659368b42a0006c54c474299b785b44c1b4ff82
FROM ${BASE_IMAGE}

ARG CUDA_VERSION
ARG GCC_TOOLSET=14
ARG CUDA_REQUIREMENTS=""
ARG OPENMPI_VERSION=5.0.7
ARG SCCACHE_VERSION=0.16.0
ARG MKL_VERSION=2024.2.0
ARG TOOLS_PYTHON=/opt/python/cp312-cp312/bin/python

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# checkov:skip=CKV_DOCKER_7:BASE_IMAGE is pinned by digest (base-images.lock), which checkov cannot see through the ARG
# checkov:skip=CKV_DOCKER_2:a builder image runs one build and exits; there is no service to health-check
# checkov:skip=CKV_DOCKER_3:the build stages write /work and /opt as root inside a throwaway container on a one-job host

# The newest GCC this nvcc accepts (catalog gcc_max), from the base's AlmaLinux 8 repositories.
# hadolint ignore=DL3041
RUN dnf install -y libpng-devel libjpeg-turbo-devel libwebp-devel bzip2 "gcc-toolset-${GCC_TOOLSET}-gcc-c++" \
    && dnf clean all
ENV PATH=/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin:${PATH}

COPY scripts/ /opt/wf/scripts/
RUN TOOLS_PYTHON="${TOOLS_PYTHON}" TOOLS_DIR=/opt/wf/tools /opt/wf/scripts/install_tools.sh
ENV PATH=/opt/wf/tools/bin:/opt/openmpi/bin:/usr/local/cuda/bin:${PATH}
RUN CUDA_VERSION="${CUDA_VERSION}" CUDA_REQUIREMENTS="${CUDA_REQUIREMENTS}" /opt/wf/scripts/install_cuda.sh
# LIBRARY_PATH is read at link time only, after every -L: -lcuda finds the toolkit's driver stub in an image
# without a driver, and the binary still names libcuda.so.1, the user's driver (as wfbuild.cuda.toolkit.link_path).
ENV CUDA_HOME=/usr/local/cuda \
    LIBRARY_PATH=/usr/local/cuda/lib64/stubs
# One layer per toolchain piece: a changed pin rebuilds only its own layer.
# hadolint ignore=DL3059
RUN MKL_VERSION="${MKL_VERSION}" MKL_ROOT=/opt/intel /opt/wf/scripts/install_mkl.sh
# hadolint ignore=DL3059
RUN OPENMPI_VERSION="${OPENMPI_VERSION}" OPENMPI_PREFIX=/opt/openmpi /opt/wf/scripts/install_openmpi.sh
# hadolint ignore=DL3059
RUN SCCACHE_VERSION="${SCCACHE_VERSION}" TOOLS_PYTHON="${TOOLS_PYTHON}" /opt/wf/scripts/install_sccache.sh

ENV MKLROOT=/opt/intel \
    CMAKE_INCLUDE_PATH=/opt/intel/include \
    CMAKE_LIBRARY_PATH=/opt/intel/lib
WORKDIR /work
