# Runtime image on a CUDA runtime base: nvidia/cuda:<cuda>-runtime-ubuntu24.04 (CUDA >= 12.6) with the
# same CPython as the slim image (copied from python:<py>-slim-bookworm: Debian 12's glibc 2.36 is older
# than Ubuntu 24.04's 2.39, so its binaries run there) and the run's wheels in /opt/venv, installed by
# install_wheels.sh with pip --require-hashes. Non-root user with the request's UID/GID, time zone.
# Stages: python (the interpreter), base (CUDA runtime + Python + user + tz), install, runtime.
ARG BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04@sha256:828c4d878adcaa4265d80c95d8ec877149b49bb2419a4cf3bb6aa889bbb7ca2e
ARG PYTHON_IMAGE=python:3.12-slim-bookworm@sha256:34386ef0cb081344d7ec1c103ba398e6e9f64e9ab3a1509accc92a4e24a07258

FROM ${PYTHON_IMAGE} AS python

FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# checkov:skip=CKV_DOCKER_7:BASE_IMAGE and PYTHON_IMAGE are pinned by digest (base-images.lock), which checkov cannot see through an ARG
ARG WF_UID=1000
ARG WF_GID=1000
ARG WF_USER=wf
ARG WF_TZ=UTC
# The shared libraries CPython's modules link (ssl, ctypes, sqlite3, bz2, lzma, zlib, expat, uuid,
# curses, readline) and tzdata; versions follow the base image's Ubuntu release, which the digest pins.
# Ubuntu 24.04 images carry a user "ubuntu" with UID/GID 1000: it is removed so the request's can be used.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends \
      ca-certificates libbz2-1.0 libexpat1 libffi8 liblzma5 libncursesw6 libreadline8t64 libsqlite3-0 \
      libssl3t64 libuuid1 tzdata zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && ln -snf "/usr/share/zoneinfo/${WF_TZ}" /etc/localtime && echo "${WF_TZ}" > /etc/timezone \
    && (userdel --remove ubuntu 2>/dev/null || true) \
    && (getent group "${WF_GID}" || groupadd --gid "${WF_GID}" "${WF_USER}") \
    && useradd --uid "${WF_UID}" --gid "${WF_GID}" --create-home --shell /bin/bash "${WF_USER}"
COPY --from=python /usr/local /usr/local
RUN ldconfig && python3 --version

FROM base AS install
COPY install_wheels.sh /opt/wf/install_wheels.sh
COPY requirements.txt /opt/wf/requirements.txt
COPY wheels/ /opt/wf/wheels/
RUN WF_FIND_LINKS=/opt/wf/wheels WF_PYTHON=/usr/local/bin/python3 bash /opt/wf/install_wheels.sh /opt/wf/requirements.txt /opt/venv

FROM base AS runtime
ARG BASE_IMAGE
ARG WF_UID=1000
ARG WF_GID=1000
ARG WF_USER=wf
ARG WF_TZ=UTC
ARG TORCH_CUDA_ARCH_LIST=""
ARG WF_RUN_ID=""
ARG WF_WHEEL_SHA256=""
ARG WF_BASE_DIGEST=""
LABEL org.opencontainers.image.title="wheelfoundry runtime (CUDA)" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${WF_BASE_DIGEST}" \
      dev.wheelfoundry.run-id="${WF_RUN_ID}" \
      dev.wheelfoundry.wheel-sha256="${WF_WHEEL_SHA256}"
COPY --from=install /opt/venv /opt/venv
COPY image_tests.py /opt/wf/image_tests.py
ENV PATH=/opt/venv/bin:${PATH} \
    TZ=${WF_TZ} \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}
USER ${WF_UID}:${WF_GID}
WORKDIR /home/${WF_USER}
HEALTHCHECK --interval=5m --timeout=30s CMD ["python", "-c", "import sys"]
CMD ["python"]
