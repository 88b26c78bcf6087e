"""Whose code a difference is, from what the ONNX graph computes by definition.

One table read by localisation (the culprit's nodes alone) and by the op sweep
(a case's graph): the oracle is the op's definition (compare.spec) where it has
a record, else ONNX's reference evaluator, run on the same inputs as eager and
ONNX Runtime. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from parity_gate.model.upstream import Owner


@dataclass(frozen=True)
class OwnerRule:
    """One row of the owner rule, where ONNX Runtime differs from eager on the culprit's
    nodes alone: how the oracle compares with eager and with ONNX Runtime, and who owns it.
    The oracle agreeing with eager means the graph is a faithful translation of the ATen
    call on these inputs, so ONNX Runtime's kernel departs from what it was asked to
    compute; agreeing with ONNX Runtime means the graph itself computes the wrong thing."""

    with_eager: bool | None  # None: no oracle ran
    with_ort: bool | None
    owner: Owner | None
    why: str  # for an unknown owner; the kernel's and translation's name themselves


OWNER_RULES: tuple[OwnerRule, ...] = (
    OwnerRule(True, False, Owner.KERNEL, ""),
    OwnerRule(False, True, Owner.TRANSLATION, ""),
    # ONNX Runtime raised (with_ort None) on a graph the oracle runs: ONNX defines what
    # the graph computes there, so the kernel that refuses it is at fault (whether or not
    # the values by definition are eager's; a wrong graph would be a second report).
    OwnerRule(True, None, Owner.KERNEL, ""),
    OwnerRule(False, None, Owner.KERNEL, ""),
    OwnerRule(False, False, None, "split"),
    OwnerRule(True, True, None, "the oracle is within tolerance of both eager and ONNX "
              "Runtime, so it cannot tell them apart"),
    OwnerRule(None, None, None, "no oracle"),
)


def owner_rule(with_eager: bool | None, with_ort: bool | None) -> OwnerRule:
    return next(r for r in OWNER_RULES if (r.with_eager, r.with_ort) == (with_eager, with_ort))


def owner_of(ref_eager: bool | None, ref_ort: bool | None) -> Owner | None:
    """The owner rule's answer (see OWNER_RULES)."""
    return owner_rule(ref_eager, ref_ort).owner


# How ONNX's reference evaluator says it lacks an op or a dtype itself: nothing about the
# graph follows from that (its numpy has no bfloat16; some ops are not implemented).
_REFERENCE_LACKS = re.compile(r"not implemented|no implementation|unable to find|"
                              r"is not supported|unsupported|bfloat16|float8|int4|"
                              r"not understood|data type", re.I)


def reference_lacks(error: BaseException) -> bool:
    """The reference evaluator failed for want of its own support, not because the graph
    is invalid on these inputs: such a failure owns nothing."""
    return isinstance(error, NotImplementedError) or \
        _REFERENCE_LACKS.search(f"{type(error).__name__}: {error}") is not None
