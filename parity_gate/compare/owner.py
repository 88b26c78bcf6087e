"""Whose code a difference is, from what the ONNX graph computes by definition.

One table read by localisation (the culprit's nodes alone) and by the op sweep
(a case's graph): the oracle is the op's definition (compare.spec) where it has
a record, else ONNX's reference evaluator, run on the same inputs as eager and
ONNX Runtime. Pure.
"""

from __future__ import annotations

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
