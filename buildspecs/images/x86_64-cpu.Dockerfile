# Builder for x86_64 CPU wheels: manylinux_2_28 + MKL (static, from the pip wheels, as PyTorch
# does) + Open MPI built from source + sccache + the tools venv wfbuild runs in.
# Build arguments come from the job's image.build_args (functions/wheelfoundry/planning/buildenv.py);
# the runner tags the image <repository>:x86_64-cpu-<hash of this file, scripts/ and the args>.
ARG BASE_IMAGE=quay.io/pypa/manylinux_2_28_x86_64@sha256:39df0042d5cc900b085aa25a0659368b42a0006c54c474299b785b44c1b4ff82
FROM ${BASE_IMAGE}

ARG OPENMPI_VERSION=5.0.7
ARG SCCACHE_VERSION=0.16.0
ARG MKL_VERSION=2024.2.0
ARG TOOLS_PYTHON=/opt/python/cp312-cp312/bin/python

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# checkov:skip=CKV_DOCKER_7:BASE_IMAGE is pinned by digest (base-images.lock), which checkov cannot see through the ARG
# checkov:skip=CKV_DOCKER_2:a builder image runs one build and exits; there is no service to health-check
# checkov:skip=CKV_DOCKER_3:the build stages write /work and /opt as root inside a throwaway container on a one-job host

# Image codecs torchvision links (auditwheel bundles them). Versions follow the base image's
# AlmaLinux 8 repositories, which the BASE_IMAGE tag pins.
# hadolint ignore=DL3041
RUN dnf install -y libpng-devel libjpeg-turbo-devel libwebp-devel bzip2 && dnf clean all

COPY scripts/ /opt/wf/scripts/
RUN TOOLS_PYTHON="${TOOLS_PYTHON}" TOOLS_DIR=/opt/wf/tools /opt/wf/scripts/install_tools.sh
ENV PATH=/opt/wf/tools/bin:/opt/openmpi/bin:${PATH}
RUN MKL_VERSION="${MKL_VERSION}" MKL_ROOT=/opt/intel /opt/wf/scripts/install_mkl.sh
# One layer per toolchain piece: a changed pin rebuilds only its own layer.
# hadolint ignore=DL3059
RUN OPENMPI_VERSION="${OPENMPI_VERSION}" OPENMPI_PREFIX=/opt/openmpi /opt/wf/scripts/install_openmpi.sh
# hadolint ignore=DL3059
RUN SCCACHE_VERSION="${SCCACHE_VERSION}" TOOLS_PYTHON="${TOOLS_PYTHON}" /opt/wf/scripts/install_sccache.sh

ENV MKLROOT=/opt/intel \
    CMAKE_INCLUDE_PATH=/opt/intel/include \
    CMAKE_LIBRARY_PATH=/opt/intel/lib
WORKDIR /work
