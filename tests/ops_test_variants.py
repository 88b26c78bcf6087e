"""Test-only op variants: ops that fail on purpose, for the sweep's isolation tests.

Imported by name (`ops_test_variants:VARIANTS`) in the parent and in the
spawned workers, which inherit the test process's sys.path.
"""

from __future__ import annotations

import torch

from parity_gate.ops.records import Arg, OpVariant


@torch.library.custom_op("paritytest::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    """A custom op with no ONNX translation: export must fail as unsupported."""
    return x * 2


@twice.register_fake
def _twice_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


X = (Arg("x", (3, 4)),)
F32 = ("float32",)

PASSING = [
    OpVariant(f"t.{name}", "test", f"torch.{name}(x)", X, F32, input_classes=("normal",))
    for name in ("sin", "cos", "tanh", "sigmoid", "neg", "exp")
]

VARIANTS: list[OpVariant] = [
    *PASSING,
    OpVariant("t.no_translation", "test", "torch.ops.paritytest.twice(x)", X, F32,
              input_classes=("normal",)),
    # a real invalid graph on the installed versions: ONNX Sin has no bfloat16
    OpVariant("t.sin_bf16", "test", "torch.sin(x)", X, ("bfloat16",), input_classes=("normal",)),
    # eager runs; export kills the worker process (SIGABRT)
    OpVariant("t.abort_on_export", "test",
              "__import__('os').abort() if torch.compiler.is_exporting() else x + 1", X, F32,
              input_classes=("normal",)),
    OpVariant("t.rejected", "test", "torch.max(x, dim=-1)", X, F32, input_classes=("empty",)),
    OpVariant("t.xfail", "test", "torch.special.digamma(x)", X, F32,
              input_classes=("normal",)).xfail("no ONNX translation for prims.digamma"),
    OpVariant("t.skip", "test", "torch.sin(x)", X, F32,
              input_classes=("normal",)).skip("demonstrates a catalogue skip"),
]
