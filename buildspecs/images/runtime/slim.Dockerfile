# Runtime image, slim: python:<py>-slim-bookworm with the run's wheels in /opt/venv, run as a non-root
# user with the request's UID/GID and time zone. The wheels are installed by install_wheels.sh (the
# script host mode runs too) with pip --require-hashes from requirements.txt, whose sha256s are the
# private index's; a CUDA variant's slim torch brings the CUDA libraries as pinned nvidia-* wheels.
# Build context: the image job's folder (wfbuild.images.runtime_image): this folder's scripts, wheels/ and
# requirements.txt. Stages: base (user, tz), install (base + pip), runtime (base + the venv only).
ARG BASE_IMAGE=python:3.12-slim-bookworm@sha256:34386ef0cb081344d7ec1c103ba398e6e9f64e9ab3a1509accc92a4e24a07258

FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# checkov:skip=CKV_DOCKER_7:BASE_IMAGE is pinned by digest (base-images.lock), which checkov cannot see through the ARG
ARG WF_UID=1000
ARG WF_GID=1000
ARG WF_USER=wf
ARG WF_TZ=UTC
# tzdata for /etc/localtime (a base that has it, as the Docker test bed's, needs no network here); its
# version follows the base image's Debian release, which the digest pins.
# hadolint ignore=DL3008
RUN if [ ! -e /usr/share/zoneinfo/UTC ]; then \
        apt-get update && apt-get install -y --no-install-recommends tzdata && rm -rf /var/lib/apt/lists/*; \
    fi \
    && ln -snf "/usr/share/zoneinfo/${WF_TZ}" /etc/localtime && echo "${WF_TZ}" > /etc/timezone \
    && (getent group "${WF_GID}" || groupadd --gid "${WF_GID}" "${WF_USER}") \
    && useradd --uid "${WF_UID}" --gid "${WF_GID}" --create-home --shell /bin/bash "${WF_USER}"

FROM base AS install
COPY install_wheels.sh /opt/wf/install_wheels.sh
COPY requirements.txt /opt/wf/requirements.txt
COPY wheels/ /opt/wf/wheels/
RUN WF_FIND_LINKS=/opt/wf/wheels bash /opt/wf/install_wheels.sh /opt/wf/requirements.txt /opt/venv

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
LABEL org.opencontainers.image.title="wheelfoundry runtime" \
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
