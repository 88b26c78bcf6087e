#!/usr/bin/env bash
# The GPU lane's device check (issue 53), one command on a machine with an NVIDIA GPU:
#
#     bash benchmarks/gpu_check.sh [OUT]        # OUT: the results folder (default gpu-check)
#
# 1. A usable GPU first: nvidia-smi must list a device. Without one it says so in one line
#    and exits 2 before installing anything.
# 2. A venv (GPU_CHECK_VENV, default $TMPDIR/parity-gate-gpu-check-venv; reused by a rerun)
#    with a CUDA build of torch and onnxruntime-gpu picked from the driver's CUDA version
#    (the "CUDA Version" nvidia-smi prints is the newest CUDA the driver runs):
#      CUDA >= 13.0      torch==2.13.0 from PyPI (PyPI's Linux wheel is the CUDA 13.0
#                        build) and onnxruntime-gpu==1.31.1 (built for CUDA 13.x);
#      CUDA 12.8 - 12.9  torch==2.13.0+cu128 from PyTorch's cu128 index (that index must be
#                        reachable) and onnxruntime-gpu==1.26.0
#                        (the last release built for CUDA 12.x);
#      older             refused in one line: no pair here supports it.
#    GPU_CHECK_TORCH, GPU_CHECK_TORCH_INDEX, GPU_CHECK_VISION, GPU_CHECK_ORT override the
#    pick; GPU_CHECK_TENSORRT names the TensorRT wheel (0: none). The gate goes in with its
#    zoo and vision extras, then the CPU onnxruntime they pulled is replaced by
#    onnxruntime-gpu (both install the `onnxruntime` module; the later one wins).
# 3. torch must see CUDA and onnxruntime must offer the CUDA provider, or it stops loudly.
#    TensorRT is probed on a one-node model: where its provider really loads, the example
#    runs on it too; where not, the summary says why.
# 4. Runs, each into OUT/<name>/results.json: the bundled example with --providers
#    cpu,cuda[,tensorrt] (eager reference on CPU, as a user runs it), and
#    benchmarks/gpu_check/zoo-cuda.yml (float16 transformers and vision models, eager on
#    CUDA too); both measure latency and placement (the performance check's default).
# 5. benchmarks/gpu_summary.py writes OUT/summary.txt (versions, GPU, driver, every case's
#    outcome per provider, the nodes that fell back with the copies around each (bytes and
#    µs), each GPU session's start-up (TensorRT's engine build, kept out of the latency),
#    latency ratios and whether ONNX Runtime was timed through IOBinding, skips and why)
#    and exits 1 when the runs did not use the GPU (no CUDA case ran, or every one fell
#    back to the CPU).
#
# Exit: 0 the GPU was used (parity failures are results, listed in the summary); 1 it was
# not, or a run crashed; 2 no usable GPU or driver. Budget: under 8 minutes on one modern
# GPU with a warm package cache or a fast index (the summary prints the time taken).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-gpu-check}"
START=$SECONDS

say() { echo "gpu_check: $*"; }
refuse() { echo "gpu_check: $*" >&2; exit 2; }

# --------------------------------------------------------------- 1. a usable GPU, first
command -v nvidia-smi >/dev/null 2>&1 \
    || refuse "no usable NVIDIA GPU: nvidia-smi not found (run this on a machine with an NVIDIA GPU and its driver)"
GPUS="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" \
    || refuse "no usable NVIDIA GPU: nvidia-smi failed (is the driver loaded?)"
[ -n "${GPUS//[[:space:]]/}" ] || refuse "no usable NVIDIA GPU: nvidia-smi lists no device"
CUDA="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n1)"
[ -n "$CUDA" ] || refuse "no usable NVIDIA GPU: nvidia-smi does not say the driver's CUDA version"
MAJOR="${CUDA%%.*}"
MINOR="${CUDA#*.}"

# --------------------------------------------------------------- 2. what the driver runs
if [ "$MAJOR" -ge 13 ]; then
    TORCH="torch==2.13.0"; TORCH_INDEX=""; VISION="torchvision==0.28.0"
    ORT="onnxruntime-gpu==1.31.1"; TRT="tensorrt-cu13"
elif [ "$MAJOR" -eq 12 ] && [ "$MINOR" -ge 8 ]; then
    TORCH="torch==2.13.0+cu128"; TORCH_INDEX="https://download.pytorch.org/whl/cu128"
    VISION="torchvision==0.28.0+cu128"; ORT="onnxruntime-gpu==1.26.0"; TRT="tensorrt-cu12"
else
    refuse "the driver runs CUDA $CUDA, older than 12.8: update the NVIDIA driver (>= 570 for CUDA 12.8, >= 580 for 13.0)"
fi
TORCH="${GPU_CHECK_TORCH:-$TORCH}"
TORCH_INDEX="${GPU_CHECK_TORCH_INDEX-$TORCH_INDEX}"
VISION="${GPU_CHECK_VISION:-$VISION}"
ORT="${GPU_CHECK_ORT:-$ORT}"
TRT="${GPU_CHECK_TENSORRT:-$TRT}"
say "GPU: ${GPUS%%$'\n'*}; driver CUDA $CUDA -> $TORCH${TORCH_INDEX:+ (from $TORCH_INDEX)}, $ORT"
if [ -n "${GPU_CHECK_PLAN_ONLY:-}" ]; then  # the pick alone (tests read it)
    echo "torch=$TORCH index=$TORCH_INDEX vision=$VISION ort=$ORT tensorrt=$TRT"
    exit 0
fi

mkdir -p "$OUT" || refuse "cannot create $OUT"
OUT="$(cd "$OUT" && pwd)"
VENV="${GPU_CHECK_VENV:-${TMPDIR:-/tmp}/parity-gate-gpu-check-venv}"
PY="$VENV/bin/python"
LOG="$OUT/install.log"
: > "$LOG"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@" >>"$LOG" 2>&1; }
fail() { echo "gpu_check: FAILED: $* (log: $LOG)" >&2; exit 1; }

say "installing into $VENV (log: $LOG)"
[ -x "$PY" ] || python3 -m venv "$VENV" >>"$LOG" 2>&1 || fail "python3 -m venv failed"
pip_install --upgrade pip || fail "pip upgrade failed"
pip_install "$TORCH" "$VISION" ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} \
    || fail "installing $TORCH $VISION failed"
pip_install "$ROOT[zoo,vision]" || fail "installing the gate from $ROOT failed"
"$PY" -m pip uninstall -y -q onnxruntime >>"$LOG" 2>&1
pip_install --force-reinstall --no-deps "$ORT" && pip_install "$ORT" || fail "installing $ORT failed"

# --------------------------------------------------------------- 3. the GPU really there
"$PY" - "$OUT/env.json" "$CUDA" "$TORCH" "$ORT" <<'PY' || fail "the GPU is not usable from Python"
import json, sys
import torch
import onnxruntime as ort
out, cuda, torch_spec, ort_spec = sys.argv[1:]
env = {"driver_cuda": cuda, "picked": {"torch": torch_spec, "onnxruntime": ort_spec},
       "torch": torch.__version__, "torch_cuda": torch.version.cuda,
       "torch_sees_cuda": torch.cuda.is_available(),
       "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
       "onnxruntime": ort.__version__, "providers": ort.get_available_providers()}
json.dump(env, open(out, "w"), indent=1)
problems = [p for p, bad in [
    (f"torch {torch.__version__} sees no CUDA device", not env["torch_sees_cuda"]),
    (f"onnxruntime {ort.__version__} offers no CUDAExecutionProvider ({env['providers']})",
     "CUDAExecutionProvider" not in env["providers"])] if bad]
for p in problems:
    print(f"gpu_check: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY

PROVIDERS="cpu,cuda"
TRT_NOTE="not tried (GPU_CHECK_TENSORRT=0)"
if [ "$TRT" != "0" ]; then
    if pip_install "$TRT"; then
        TRT_LIBS="$("$PY" -c 'import os, tensorrt_libs; print(os.path.dirname(tensorrt_libs.__file__))' 2>/dev/null)"
        [ -n "$TRT_LIBS" ] && export LD_LIBRARY_PATH="$TRT_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        TRT_NOTE="$("$PY" - <<'PY' 2>&1 | tail -n1
import onnx, onnxruntime as ort
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
so = ort.SessionOptions()
so.log_severity_level = 3
s = ort.InferenceSession(model.SerializeToString(), so,
                         providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
print("loads" if s.get_providers()[0] == "TensorrtExecutionProvider"
      else "does not load: the session fell back to " + ", ".join(s.get_providers()))
PY
)"
    else
        TRT_NOTE="does not load: installing $TRT failed (see install.log)"
    fi
    [ "$TRT_NOTE" = "loads" ] && PROVIDERS="cpu,cuda,tensorrt"
fi
echo "$TRT_NOTE" > "$OUT/tensorrt.txt"
say "TensorRT provider: $TRT_NOTE"

# --------------------------------------------------------------- 4. the runs
JOBS="${GPU_CHECK_JOBS:-4}"
run() {  # name, timeout (s), then the gate's arguments
    local name="$1" limit="$2"; shift 2
    say "run $name: parity-gate run $*"
    HF_HUB_OFFLINE=1 timeout "$limit" "$VENV/bin/parity-gate" run "$@" --out "$OUT/$name" \
        --no-cache --jobs "$JOBS" --quiet > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name $rc" >> "$OUT/runs.txt"
    tail -n1 "$OUT/$name.log"
}
: > "$OUT/runs.txt"
run example 240 --example --providers "$PROVIDERS"
run zoo 300 "$ROOT/benchmarks/gpu_check/zoo-cuda.yml"

# --------------------------------------------------------------- 5. the summary
"$PY" "$ROOT/benchmarks/gpu_summary.py" "$OUT" --seconds "$((SECONDS - START))"
