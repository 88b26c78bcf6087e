"""GPU-only hazards checked on the CPU: TF32 on the eager side of a CUDA reference.

The check reads the TF32 switches as `tf32_switches` reads them in the worker (set here
for real on torch's own flags, which a CPU build keeps) and the manifest's reference
device; no GPU is needed to tell that a CUDA reference would run in TF32. The rule on a
real export (its test pair) is in test_hazards.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from parity_gate.hazards import checks
from parity_gate.hazards.context import HazardContext, tf32_switches
from parity_gate.hazards.rules import BY_ID
from parity_gate.manifest.models import InputSpec

RULE = BY_ID["tf32-reference"]


@pytest.fixture
def gate_switches() -> Iterator[None]:
    """TF32 off as the gate leaves it before the factory runs; the process's own afterwards."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def _ctx(device: str, dtype: str = "float32") -> HazardContext:
    return HazardContext("mlp", "dynamo", [InputSpec(name="x")], dtype=dtype,
                         reference_device=device, tf32=tf32_switches())


def test_tf32_on_a_cuda_reference_is_found_with_the_switches(gate_switches: None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    (found,) = checks.tf32_reference(_ctx("cuda"))
    assert found.message.startswith(
        "torch.backends.cuda.matmul.allow_tf32 (float32_matmul_precision 'high') and "
        "torch.backends.cudnn.allow_tf32 on while eager computes the float32 reference on CUDA")
    assert "less accurate side" in found.message and "use_tf32: 0" in found.message


def test_the_matmul_precision_alone_turns_tf32_on(gate_switches: None) -> None:
    torch.set_float32_matmul_precision("high")  # how most training scripts ask for TF32
    (found,) = checks.tf32_reference(_ctx("cuda"))
    assert "float32_matmul_precision 'high'" in found.message
    assert "cudnn" not in found.message


def test_cudnn_tf32_alone_is_found(gate_switches: None) -> None:
    torch.backends.cudnn.allow_tf32 = True
    (found,) = checks.tf32_reference(_ctx("cuda"))
    assert found.message.startswith("torch.backends.cudnn.allow_tf32 on while")


@pytest.mark.parametrize(("device", "dtype"), [("cpu", "float32"), ("cuda", "float16"),
                                               ("cuda", "bfloat16")])
def test_tf32_does_not_touch_a_cpu_reference_or_narrower_dtypes(
        gate_switches: None, device: str, dtype: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    assert checks.tf32_reference(_ctx(device, dtype)) == []


def test_tf32_off_on_a_cuda_reference_is_clean(gate_switches: None) -> None:
    assert tf32_switches() == ()
    assert checks.tf32_reference(_ctx("cuda")) == []


def test_the_rule_names_its_fix() -> None:
    assert RULE.check == "tf32_reference" and RULE.action.value == "warn"
    assert "allow_tf32" in RULE.fix and "reference_device: cpu" in RULE.fix
