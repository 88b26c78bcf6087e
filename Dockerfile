# The action's image, in two targets that action.yml picks per runner:
#   cpu: slim Python 3.11, CPU torch (PyTorch's CPU wheel index), onnxruntime
#   gpu: CUDA 13.0 runtime + cuDNN 9, CUDA torch, onnxruntime-gpu
# The GPU versions match each other: torch 2.13.0's Linux wheels on PyPI are built for CUDA 13.0
# with cuDNN 9, and onnxruntime-gpu on PyPI is built for CUDA 13.x with cuDNN 9 since 1.28
# (ONNX Runtime's CUDA EP table: any 13.x runtime, cuDNN 9). CUDA 13 needs NVIDIA driver >= 580.
#
# No `# syntax=` line: it would make BuildKit pull a frontend image from Docker Hub, and the
# frontend built into Docker >= 20.10 reads everything here (RUN --mount, secrets).
#
# Every Python package comes from a hash lock, docker/{build,cpu,gpu}.lock (`docker/lock.py
# lock` resolves docker/*.in into them; tests/test_container_lock.py keeps them in step with
# the pins), installed with `pip install --require-hashes`, and each image's /opt/venv is
# checked to hold exactly its lock plus the gate. Three ways to build (README, "Building the
# image"), all from the same locks:
#   online   docker build --target cpu .
#   mirror   --build-arg PIP_INDEX_URL=... [PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, TORCH_INDEX]
#            credentials only as BuildKit secrets, never build args (`docker history` keeps
#            those): --secret id=pip_conf,src=pip.conf and/or --secret id=netrc,src=.netrc
#   offline  python3 docker/lock.py download wheelhouse/cpu build cpu   (on a connected machine)
#            --build-arg WHEELHOUSE=wheelhouse/cpu: pip runs with --no-index from that folder
#            of the build context (.dockerignore admits wheelhouse/), so no index is needed
# A proxy goes in Docker's predefined build args (--build-arg https_proxy=...), which
# `docker history` does not keep either.
#
# Base images: by tag here, and by digest where known (see README): the digest is pinned
# with --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:... .
# No USER and no WORKDIR: Actions mounts the workspace and action.yml sets --workdir; it runs as
# root so that an `install` command can pip-install, and parity_gate/github/action.py hands the
# files it created back to the runner's user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

# The offline wheelhouse (wheels, and .debs under debs/ for the gpu target's Python), or a
# placeholder when building from an index.
FROM scratch AS wheelhouse
ARG WHEELHOUSE=
COPY ${WHEELHOUSE:-docker/README.md} /

# The gate as a wheel, built apart so that setuptools and the sources stay out of both images.
FROM ${PYTHON_IMAGE} AS wheel
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG WHEELHOUSE=
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=docker,target=/ctx/docker \
    --mount=type=secret,id=pip_conf \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    python -m venv /opt/build \
 && /opt/build/bin/python /ctx/docker/lock.py install build
COPY pyproject.toml README.md /src/
COPY parity_gate /src/parity_gate
RUN /opt/build/bin/pip wheel --no-cache-dir --disable-pip-version-check --no-deps \
        --no-build-isolation --no-index --wheel-dir /wheels /src

FROM ${PYTHON_IMAGE} AS cpu
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG WHEELHOUSE=
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=docker,target=/ctx/docker \
    --mount=type=secret,id=pip_conf \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    python -m venv /opt/venv \
 && python /ctx/docker/lock.py install cpu
# The gate goes in with --no-deps after its locked requirements; the check fails the build
# unless /opt/venv holds exactly docker/cpu.lock and the gate, and the wheel's data files
# (the schemas, the bundled example and its recorded inputs) are in it.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    --mount=type=bind,source=docker,target=/ctx/docker \
    pip install --no-cache-dir --no-deps --no-index /wheels/parity_gate-*.whl \
 && python /ctx/docker/lock.py verify cpu --also parity-gate \
 && pip check \
 && python -c "import parity_gate.github.action, parity_gate.runner" \
 && parity-gate check --example
ENTRYPOINT ["python", "-m", "parity_gate.github.action"]

# The CUDA base with a Python: Ubuntu's own python3 (3.12), security-patched in place; the
# distro release is what the base image pins, so apt package versions are left to it. Offline,
# the .debs come from the wheelhouse's debs/ folder (README says how to fill it).
FROM ${CUDA_IMAGE} AS gpu-python
ARG WHEELHOUSE=
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
# hadolint ignore=DL3008
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    if [ -n "$WHEELHOUSE" ]; then \
        apt-get install -y --no-install-recommends /wheelhouse/debs/*.deb; \
    else \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv; \
    fi \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

# torch from PyPI is the CUDA 13.0 build: no torch index by default (a mirror of PyTorch's
# cu130 index also works, as TORCH_INDEX).
FROM gpu-python AS gpu
ARG TORCH_INDEX=
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG WHEELHOUSE=
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=docker,target=/ctx/docker \
    --mount=type=secret,id=pip_conf \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    python /ctx/docker/lock.py install gpu
# onnxruntime-gpu, never the CPU `onnxruntime` (both install the same module, the later one
# wins): hence the gate with --no-deps, after its locked requirements. The build fails unless
# /opt/venv is exactly docker/gpu.lock and the gate, and this onnxruntime really has the CUDA
# provider.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    --mount=type=bind,source=docker,target=/ctx/docker \
    pip install --no-cache-dir --no-deps --no-index /wheels/parity_gate-*.whl \
 && python /ctx/docker/lock.py verify gpu --also parity-gate \
 && python -c "import parity_gate.github.action, parity_gate.runner, onnxruntime as o; \
assert 'CUDAExecutionProvider' in o.get_available_providers(), o.get_available_providers()"
ENTRYPOINT ["python", "-m", "parity_gate.github.action"]
