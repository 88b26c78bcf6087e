"""The fix sentence of a localised failure whose owner is not the model's own code: one
record per finding, first that applies wins (a size the model fixed has its own table in
localise.sized). What an engineer would write in the review: what to change now, and
where the lasting fix belongs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parity_gate.model.localisation import Localisation
from parity_gate.model.upstream import Owner


@dataclass(frozen=True)
class Advice:
    name: str
    applies: Callable[[Localisation], bool]
    text: Callable[[Localisation], str]


def _op(loc: Localisation) -> str:
    c = loc.culprit
    return f"`{c.aten or c.call}`" if c is not None else "this op"


def _by(loc: Localisation) -> str:
    c = loc.culprit
    return f" (`{c.owned_by.split(':', 1)[0]}`)" if c is not None and c.owned_by else ""


ADVICE: tuple[Advice, ...] = (
    Advice("artefact", lambda loc: loc.artefact is True,
           lambda loc: "ONNX Runtime is as close to a float64 run as eager is: a tolerance "
                       "artefact of an ill-conditioned computation, not a defect; widen this "
                       "output's tolerance or set `localise.artefacts: pass`"),
    Advice("optimizer", lambda loc: loc.first_level not in (None, "disabled"),
           lambda loc: f"it appears only with ONNX Runtime's graph optimizations at "
                       f"'{loc.first_level}': run the session below that level "
                       "(`SessionOptions.graph_optimization_level`) until ONNX Runtime's "
                       "rewrite is fixed"),
    Advice("capture", lambda loc: loc.culprit is not None and loc.culprit.owner is Owner.CAPTURE,
           lambda loc: f"torch.export already computes {_op(loc)} differently from eager: "
                       "write that line with ops it captures faithfully until torch is "
                       "fixed (upstream status below)"),
    Advice("translation",
           lambda loc: loc.culprit is not None and loc.culprit.owner is Owner.TRANSLATION,
           lambda loc: f"the exporter translates {_op(loc)} wrongly: write that line with "
                       "ops that translate correctly, or pin an onnxscript without the defect, "
                       "until torchlib is fixed (upstream status below)"),
    Advice("kernel", lambda loc: loc.culprit is not None and loc.culprit.owner is Owner.KERNEL,
           lambda loc: f"ONNX Runtime's kernel{_by(loc)} computes {_op(loc)} wrongly on a "
                       "valid graph: run it on another provider or an ONNX Runtime version "
                       "without the defect until it is fixed (upstream status below)"),
    Advice("provider", lambda loc: loc.provider_specific is True,
           lambda loc: "the CPU provider matches eager: the defect is in this provider's "
                       "kernels; run this model on CPU or another provider until it is fixed"),
)


def fix_of(loc: Localisation) -> str:
    """The first advice that applies, "" when none does (nothing an engineer could act on)."""
    return next((a.text(loc) for a in ADVICE if a.applies(loc)), "")
