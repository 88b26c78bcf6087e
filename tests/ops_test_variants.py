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
              input_classes=("normal",)).xfail("no ONNX translation for prims.digamma",
                                               "https://github.com/microsoft/onnxscript/issues/0"),
    OpVariant("t.skip", "test", "torch.sin(x)", X, F32,
              input_classes=("normal",)).skip("demonstrates a catalogue skip"),
    # eager's answer depends on the layout, as a vectorised kernel's does on special
    # values (gelu(inf) on AVX-512): contiguous NaN, strided (scalar path) and the
    # exported graph x itself
    OpVariant("t.layout_quirk", "test",
              "x if torch.compiler.is_exporting() or not x.is_contiguous() "
              "else torch.where(x > 0, x * float('nan'), x)", X, F32,
              input_classes=("normal",)),
    # real elementwise ops for the exact re-check (integers wrap, floats in mpmath)
    OpVariant("t.floor_divide", "test", "torch.floor_divide(x, y)",
              (Arg("x", (13, 13)), Arg("y", (13, 13), nonzero_int=True)),
              ("float32", "int8"), input_classes=("specials",)),
]
