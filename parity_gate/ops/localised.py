"""Localised model failures → defect signatures, the kind the op sweep makes.

A failing case of a model run whose localisation names a culprit (the ATen node
whose inputs agree with eager's and whose output does not, and whose code owns
it) is a defect of that op: the op as users call it, the options the call sets
(`attn_mask`, `reduce='mean'`: the trigger beyond the op itself), the input class
the culprit's node saw (its verified node repro's values: ordinary, special or
empty), the symptom at the worst element and the owner the owner check named.
Cases that share all of these are one report, whatever module they come from.
Pure but for reading the node repro's arrays: a RunResult in, records out.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from parity_gate.compare.tolerance import close
from parity_gate.model.comparison import Verdict
from parity_gate.model.localisation import Culprit
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause, ExportStage
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import Owner, Signature, Symptom
from parity_gate.ops.records import user_op
from parity_gate.ops.signatures import CLASS_ORDER, DTYPE_ORDER, value_symptom

# The op libraries an exported graph's culprit can come from and the sweep names ops by:
# ATen and its primitives (`torch.var` exports as `prims.var.default`).
OP_NAMESPACES = ("aten.", "prims.")
# torch submodules whose functions ATen names with the submodule as prefix.
_PREFIXED = ("special", "linalg", "fft")
# Whose code an export failure is, by the step of `torch.onnx.export` it stopped in: a
# capture or decomposition failure is torch's, a translation's torchlib's. A capture that
# stops in the model's own line is the model's (`export_owner`): never filed upstream.
EXPORT_OWNERS = {ExportStage.CAPTURE: Owner.CAPTURE, ExportStage.DECOMPOSE: Owner.CAPTURE,
                 ExportStage.TORCHSCRIPT: Owner.CAPTURE,
                 ExportStage.TRANSLATE: Owner.TRANSLATION}
EXPORT_FAILURES = {Outcome.EXPORT_ERROR: Symptom.EXPORT_FAILS,
                   Outcome.UNSUPPORTED_OP: Symptom.UNSUPPORTED}
# An ONNX Runtime difference that first shows at one of its graph-optimization levels is
# its optimizer's (a rewrite), not a kernel's: `Signature.kernel` says so in these words.
OPTIMIZER = "graph optimizer"
_LEVEL_NAMES = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                "all": "ORT_ENABLE_ALL"}
_BY_VERDICT = {Verdict.SHAPE: Symptom.WRONG_SHAPE, Verdict.DTYPE: Symptom.WRONG_DTYPE,
               Verdict.SIGNED_ZERO: Symptom.SIGNED_ZERO_LOST}


def localised(case: CaseResult) -> Culprit | None:
    """The culprit of a failing model case that localisation pinned to an ATen op and that
    is a defect (not a tolerance artefact, not eager's own error); None otherwise."""
    loc = case.localisation
    if case.op is not None or not case.failed or loc is None or loc.culprit is None \
            or case.outcome is Outcome.EAGER_ERROR or loc.artefact is True:
        return None
    return loc.culprit if loc.culprit.aten.startswith(OP_NAMESPACES) else None


def node_worst(node_repro: str | None) -> tuple[tuple[int, ...], np.ndarray, np.ndarray] | None:
    """The culprit node's worst element by the repro's own rule (out of tolerance, NaN
    worst): (its index, eager's output, ONNX Runtime's output); None without both values
    recorded, or where they agree."""
    if not node_repro:
        return None
    folder = Path(node_repro)
    try:
        meta = json.loads((folder / "case.json").read_text(encoding="utf-8"))
        with np.load(folder / "expected.npz") as data:
            eager = data[meta["output"]]
        with np.load(folder / "onnxruntime.npz") as data:
            got = data[meta["output"]]
        atol, rtol = float(meta["atol"]), float(meta["rtol"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if eager.shape != got.shape or eager.dtype.kind not in "biuf" or got.dtype.kind not in "biuf":
        return None
    bad = ~close(eager, got, atol, rtol)
    if not bad.any():
        return None
    with np.errstate(all="ignore"):
        diff = np.abs(got.astype(np.float64) - eager.astype(np.float64))
    score = np.where(bad, np.where(np.isnan(diff), np.inf, diff), -1.0)
    at = tuple(int(i) for i in np.unravel_index(int(np.argmax(score)), eager.shape))
    return at, eager, got


def symptom_of(case: CaseResult) -> Symptom:
    """What a maintainer sees at the culprit: its node's worst element (overflow to inf,
    NaN, ...: the model's own output may be a bool computed from it), else the worst
    output's verdict, or its worst element's values."""
    loc = case.localisation
    node = node_worst(loc.node_repro if loc is not None else None)
    found = value_symptom(float(node[1][node[0]]), float(node[2][node[0]])) \
        if node is not None else None
    if found is not None:
        return found
    worst = case.worst()
    if worst is None or worst.passed:
        return Symptom.WRONG_VALUES
    if worst.verdict in _BY_VERDICT:
        return _BY_VERDICT[worst.verdict]
    if node is not None:  # the culprit's values differ, nothing special among them
        return Symptom.WRONG_VALUES
    return value_symptom(worst.ref_value, worst.got_value) or Symptom.WRONG_VALUES


def option_args(culprit: Culprit) -> list[str]:
    """The options in the op sweep's spelling (`ops.signatures.args_that_matter`): a
    string value is part of what the op does (`reduce='mean'`), any other only by name."""
    return sorted(f"{k}={v}" if v[:1] in "'\"" else k for k, v in culprit.options.items())


def aten_names(op: str) -> set[str]:
    """The ATen names a public torch function exports as: its own name, prefixed by its
    submodule where ATen prefixes it (`torch.special.erfcx` → `special_erfcx`), and a
    loss by its `_loss` kernel (`F.cross_entropy` → `cross_entropy_loss`)."""
    *path, short = op.split(".")
    names = {short, f"{short}_loss"}
    if path and path[-1] in _PREFIXED:
        names.add(f"{path[-1]}_{short}")
    return names


def user_op_of(culprit: Culprit) -> str:
    """The op as users call it: the torch call on the culprit's source line that exports
    as the culprit's ATen op (`F.scaled_dot_product_attention(...)` →
    torch.nn.functional.…, `torch.special.erfcx` for `special_erfcx`), else the op sweep
    catalogue's call of it, else "" (the ATen name stands)."""
    name = culprit.aten.split(".")[1]
    for call in re.findall(r"[A-Za-z_][\w.]*(?=\()", culprit.code):
        found = user_op(call + "()")
        if found.startswith("torch.") and name in aten_names(found):
            return found
    return _catalogued().get(name, "")


@functools.cache
def _catalogued() -> dict[str, str]:
    """The op sweep's public name per op name (torch.* and F.* before Tensor methods)."""
    from parity_gate.ops.catalogue import VARIANTS

    out: dict[str, str] = {}
    for v in VARIANTS:
        name = user_op(v.call)
        for aten in aten_names(name) if name else ():
            if aten not in out or out[aten].startswith("Tensor."):
                out[aten] = name
    return out


def input_class(node_repro: str | None) -> str:
    """What the culprit's node was fed, read from its verified repro (the eager call's
    arguments, else the ONNX nodes' inputs): `empty`, `specials` (NaN or ±inf) or
    `normal`; "" when there is no repro to read."""
    if not node_repro:
        return ""
    folder = Path(node_repro)
    for name in ("args.npz", "inputs.npz"):
        try:
            with np.load(folder / name) as data:
                arrays = [data[k] for k in data.files]
        except (OSError, ValueError):
            continue
        if any(a.size == 0 for a in arrays):
            return "empty"
        floats = [a for a in arrays if a.dtype.kind in "fc"]
        return "specials" if any(not np.isfinite(a).all() for a in floats) else "normal"
    return ""


def export_owner(case: CaseResult) -> Owner | None:
    """Whose code a model's export failure is, by the step it stopped in (`EXPORT_OWNERS`):
    no translation for an op is torchlib's; a capture that stopped in the model's own
    frame is the model's (torch.export cannot trace that line: the report's owner too);
    None for a step not known."""
    cause = case.cause
    if case.outcome is Outcome.UNSUPPORTED_OP:
        return Owner.TRANSLATION
    if cause is None:
        return None
    if cause.stage is ExportStage.CAPTURE and (cause.source or cause.where):
        return Owner.MODEL
    return EXPORT_OWNERS.get(cause.stage)


def exported(case: CaseResult) -> ExportCause | None:
    """The cause of a model case that failed to export, where one was recorded."""
    if case.op is not None or case.outcome not in EXPORT_FAILURES or case.cause is None:
        return None
    return case.cause


def export_signature(case: CaseResult) -> Signature | None:
    """A model's export failure as a defect: the op the exporter named (else the error's
    type), the symptom by outcome, the owner by step; None when the model owns it or the
    step is not known (nothing to route it to)."""
    cause = exported(case)
    owner = export_owner(case) if cause is not None else None
    if cause is None or owner is None or not owner.upstream:
        return None
    op = cause.op if cause.op.startswith(OP_NAMESPACES) else ""
    return Signature(
        user_op=_catalogued().get(op.split(".")[1], "") if op else "",
        overload=op or cause.kind, symptom=EXPORT_FAILURES[case.outcome], owner=owner,
        calls=[cause.where or cause.message], dtypes=[case.key.dtype], lead=case.id)


def optimizer_level(case: CaseResult) -> str:
    """The ORT graph-optimization level a localised difference first shows at, where it
    vanishes with optimizations off ("ORT_ENABLE_BASIC"); "" for a kernel's."""
    loc = case.localisation
    first = loc.first_level if loc is not None else None
    return _LEVEL_NAMES.get(first or "", "")


def signature_of(case: CaseResult, culprit: Culprit) -> Signature | None:
    """The one-case signature (scope filled in by `group`); None when the owner check
    could not say whose code it is (nothing to route it to)."""
    if culprit.owner is None or not culprit.owner.upstream:
        return None  # nothing to route it to, or the model's own code (fixed in the repo)
    loc = case.localisation
    cls = input_class(loc.node_repro if loc is not None else None)
    lowering = culprit.owned_by.rsplit(".", 1)[-1] if culprit.owner is Owner.TRANSLATION \
        and culprit.owned_by.startswith("onnxscript ") else ""
    level = optimizer_level(case) if culprit.owner is Owner.KERNEL else ""
    # the ONNX op type alone ("Mul" of "Mul on CPUExecutionProvider"); a difference that
    # needs an optimization level is the optimizer's, named with the op it rewrote
    kernel = (f"{OPTIMIZER} at {level}: {culprit.onnx_nodes[0] if culprit.onnx_nodes else ''}"
              .rstrip(": ") if level else culprit.owned_by.split(" ")[0]) \
        if culprit.owner is Owner.KERNEL else ""
    return Signature(
        user_op=user_op_of(culprit), overload=culprit.aten, symptom=symptom_of(case),
        owner=culprit.owner, args=option_args(culprit), kernel=kernel, lowering=lowering,
        calls=[culprit.code or culprit.call], dtypes=[case.key.dtype],
        input_classes=[cls] if cls else [], lead=case.id)


def group(run: RunResult) -> list[tuple[Signature, list[CaseResult]]]:
    """One signature per defect seen by localisation, its cases lead first (by id), with
    the dtypes, input classes and source lines of all of them as its scope."""
    groups: dict[str, list[tuple[CaseResult, Signature]]] = {}
    for case in sorted(run.cases, key=lambda c: c.key.sort_key):
        culprit = localised(case)
        sig = signature_of(case, culprit) if culprit is not None else export_signature(case)
        if sig is not None:
            groups.setdefault(sig.key, []).append((case, sig))
    out = []
    for pairs in groups.values():
        sigs = [s for _, s in pairs]
        out.append((Signature.from_dict({
            **sigs[0].to_dict(),
            "calls": list(dict.fromkeys(x for s in sigs for x in s.calls)),
            "dtypes": sorted({x for s in sigs for x in s.dtypes}, key=_rank(DTYPE_ORDER)),
            "input_classes": sorted({x for s in sigs for x in s.input_classes},
                                    key=_rank(CLASS_ORDER))}), [c for c, _ in pairs]))
    return out


def unowned(run: RunResult) -> list[tuple[Culprit, list[CaseResult]]]:
    """Localised failures whose owner is unknown, by culprit op: shown as not searched."""
    out: dict[str, tuple[Culprit, list[CaseResult]]] = {}
    for case in sorted(run.cases, key=lambda c: c.key.sort_key):
        culprit = localised(case)
        if culprit is not None and culprit.owner is None:
            out.setdefault(culprit.aten, (culprit, []))[1].append(case)
    return list(out.values())


def _rank(order: tuple[str, ...]) -> Callable[[str], tuple[int, str]]:
    return lambda x: (order.index(x) if x in order else len(order), x)
