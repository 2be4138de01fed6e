# Builder for x86_64 CUDA wheels: PyTorch's own manylinux_2_28 CUDA builder (toolkit, cuDNN,
# NCCL headers for compiling; no GPU needed) + MKL + Open MPI (CUDA-aware) + sccache + tools venv.
# BASE_IMAGE is pytorch/manylinux2_28-builder:cuda<CUDA_VERSION> (the job's image.base), always
# passed by the runner; no default, since a default would have to be pinned (base-images.lock).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ARG CUDA_VERSION=12.6
ARG OPENMPI_VERSION=5.0.7
ARG SCCACHE_VERSION=v0.10.0
ARG MKL_VERSION=2024.2.0
ARG TOOLS_PYTHON=/opt/python/cp312-cp312/bin/python

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# checkov:skip=CKV_DOCKER_7:BASE_IMAGE is pinned by digest (base-images.lock), which checkov cannot see through the ARG
# checkov:skip=CKV_DOCKER_2:a builder image runs one build and exits; there is no service to health-check
# checkov:skip=CKV_DOCKER_3:the build stages write /work and /opt as root inside a throwaway container on a one-job host

# hadolint ignore=DL3041
RUN dnf install -y libpng-devel libjpeg-turbo-devel libwebp-devel bzip2 && dnf clean all

ENV CUDA_HOME=/usr/local/cuda-${CUDA_VERSION}
COPY scripts/ /opt/wf/scripts/
RUN TOOLS_PYTHON="${TOOLS_PYTHON}" TOOLS_DIR=/opt/wf/tools /opt/wf/scripts/install_tools.sh
ENV PATH=/opt/wf/tools/bin:/opt/openmpi/bin:${CUDA_HOME}/bin:${PATH}
RUN MKL_VERSION="${MKL_VERSION}" MKL_ROOT=/opt/intel /opt/wf/scripts/install_mkl.sh
# One layer per toolchain piece: a changed pin rebuilds only its own layer.
# hadolint ignore=DL3059
RUN OPENMPI_VERSION="${OPENMPI_VERSION}" OPENMPI_PREFIX=/opt/openmpi /opt/wf/scripts/install_openmpi.sh
# hadolint ignore=DL3059
RUN SCCACHE_VERSION="${SCCACHE_VERSION}" /opt/wf/scripts/install_sccache.sh

ENV MKLROOT=/opt/intel \
    CMAKE_INCLUDE_PATH=/opt/intel/include \
    CMAKE_LIBRARY_PATH=/opt/intel/lib
WORKDIR /work
