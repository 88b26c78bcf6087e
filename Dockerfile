# syntax=docker/dockerfile:1
# The action's image, in two targets that action.yml picks per runner:
#   cpu: slim Python 3.11, CPU torch (PyTorch's CPU wheel index), onnxruntime
#   gpu: CUDA 13.0 runtime + cuDNN 9, CUDA torch, onnxruntime-gpu
# The GPU versions match each other: torch 2.13.0's Linux wheels on PyPI are built for CUDA 13.0
# with cuDNN 9, and onnxruntime-gpu on PyPI is built for CUDA 13.x with cuDNN 9 since 1.28
# (ONNX Runtime's CUDA EP table: any 13.x runtime, cuDNN 9). CUDA 13 needs NVIDIA driver >= 580
# on the runner; for older drivers build with CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-
# ubuntu24.04, ORT_GPU_VERSION=1.26.0 and TORCH_INDEX=https://download.pytorch.org/whl/cu128.
# No USER and no WORKDIR: Actions mounts the workspace and action.yml sets --workdir; it runs as
# root so that an `install` command can pip-install, and parity_gate/github/action.py hands the files it
# created back to the runner's user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

# The gate as a wheel, built apart so that setuptools and the sources stay out of both images.
FROM ${PYTHON_IMAGE} AS wheel
COPY pyproject.toml README.md /src/
COPY parity_gate /src/parity_gate
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels /src

FROM ${PYTHON_IMAGE} AS cpu
ARG TORCH_VERSION=2.13.0
ARG ORT_VERSION=1.32.0
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# The gate goes in with --no-deps after its pinned requirements, so the image holds exactly these.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu \
        "torch==${TORCH_VERSION}" \
 && pip install --no-cache-dir \
        "onnxruntime==${ORT_VERSION}" onnx==1.23.2 onnxscript==0.7.2 numpy==2.4.6 \
        ml_dtypes==0.6.0 PyYAML==6.0.4 pydantic==2.14.4 requests==2.34.2 \
 && pip install --no-cache-dir --no-deps /wheels/parity_gate-*.whl \
 && python -c "import parity_gate.github.action, parity_gate.runner"
ENTRYPOINT ["python", "-m", "parity_gate.github.action"]

FROM ${CUDA_IMAGE} AS gpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://pypi.org/simple
ARG ORT_GPU_VERSION=1.31.1
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
# Ubuntu's own python3 (3.12), security-patched in place: the distro release is what the base
# image tag pins, so apt package versions are left to it.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv
# onnxruntime-gpu, never the CPU `onnxruntime` (both install the same module, the later one
# wins): hence the gate with --no-deps, after its other requirements. The build fails unless
# this onnxruntime really has the CUDA provider.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
 && pip install --no-cache-dir \
        "onnxruntime-gpu==${ORT_GPU_VERSION}" onnx==1.23.2 onnxscript==0.7.2 numpy==2.4.6 \
        ml_dtypes==0.6.0 PyYAML==6.0.4 pydantic==2.14.4 requests==2.34.2 \
 && pip install --no-cache-dir --no-deps /wheels/parity_gate-*.whl \
 && python -c "import parity_gate.github.action, parity_gate.runner, onnxruntime as o; \
assert 'CUDAExecutionProvider' in o.get_available_providers(), o.get_available_providers()"
ENTRYPOINT ["python", "-m", "parity_gate.github.action"]
