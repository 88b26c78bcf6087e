"""Defect signatures → root causes: what one upstream report is about.

A signature (`ops.signatures`) is one symptom of one call. Many of them share a
cause: a loss with `reduction='mean'` returns 0 where eager returns NaN on an
empty input because the mean under it does, whatever the loss, its keyword
arguments or the first node of its decomposition (`aten::sub.Tensor`). The
rule an exporter maintainer applies: a decomposed call that fails the way one
of its own ATen ops fails when swept alone, on the same input class, is that
op's defect; the cause is the function that owns it (the torchlib function of
that op, or the ONNX Runtime kernel) and the minimal trigger (the input class
for a wrong value; none for an error, which shows on any input). Arguments and
symptom wording never split a cause. A node ONNX Runtime has no kernel for is one cause per
execution provider and dtype, whatever the node: its maintainer adds the dtype's kernels,
and one report lists the nodes that lack it (`listing`). A torchlib function that emits a
ONNX node torchlib emits for an integer or bool dtype its type constraints (at the exported
opset) exclude is one cause per node, those dtypes its trigger (isnan on every integer dtype
is one IsNaN fix); one excluded on a float dtype alone stays in that dtype's listing (a
cast fixes them all). Pure:
signatures in, records out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from parity_gate.model.results import CaseResult
from parity_gate.model.upstream import GAPS, PROVIDERS, OpRef, Owner, Signature, Symptom

Found = tuple[Signature, list[CaseResult]]
# Symptoms about the values an op returns: one cause may show several of them (a NaN
# dropped here, a wrong number there) on the same trigger. The rest are one cause each.
VALUES = frozenset({Symptom.NAN_DROPPED, Symptom.NAN_INTRODUCED, Symptom.SIGNED_ZERO_LOST,
                    Symptom.OVERFLOW_TO_INF, Symptom.INF_LOST, Symptom.WRONG_VALUES})
TYPES = frozenset({Symptom.WRONG_DTYPE, Symptom.LOW_PRECISION})
# ATen ops that move or convert data and compute nothing: never the culprit of a value.
PLUMBING = frozenset({
    "convert_element_type", "_to_copy", "view", "_unsafe_view", "reshape", "expand",
    "unsqueeze", "squeeze", "scalar_tensor", "clone", "zeros_like", "empty_like", "ones_like",
    "new_full", "full", "zeros", "t", "transpose", "permute", "alias", "detach", "copy",
    "slice", "select", "lift_fresh_copy"})


# An ONNX node torchlib emits for integer or bool dtypes its type constraints exclude: one
# cause per node (isnan on every integer dtype is one fix), its trigger those dtypes.
EXCLUDED = "type_constraints"
DTYPE_ORDER = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16",
               "int8", "uint8", "bool")


# Keyword arguments that only choose the part of the input a call works on, never what it
# computes: never a cause's trigger, though every call of it passes one.
SHAPE_ARGS = frozenset({"dim", "keepdim", "size", "stride", "padding", "kernel_size",
                        "output_size", "scale_factor"})


@dataclass(frozen=True)
class Cause:
    """One root cause: the owner, the function at fault, the trigger, and its signatures
    (the lead first: the most direct call that shows it)."""

    key: str
    owner: Owner
    function: str      # "aten_mean" (torchlib), "Atan(7)" (a kernel), or the call's op
    culprit: str       # the ATen overload whose translation is at fault ("" when the call's)
    trigger: str       # the input class a wrong value needs; where an error alone shows
    members: list[Found] = field(default_factory=list)
    listing: bool = False  # a dtype gap: one report lists its members, each its own defect

    @property
    def lead(self) -> Signature:
        return self.members[0][0]

    @property
    def args(self) -> list[str]:
        """The keyword arguments every call of this cause passes (their names): part of
        its trigger, so a title names them and a report of it must."""
        names = [{a.split("=")[0] for a in s.args} for s, _ in self.members]
        if self.listing:
            return []  # a node that lacks a dtype lacks it whatever the call passes
        return sorted(set.intersection(*names) - SHAPE_ARGS) if names else []

    @property
    def also(self) -> list[Signature]:
        """The other signatures of this cause: the draft's "also seen"."""
        return [s for s, _ in self.members[1:]]


def family(symptom: Symptom) -> str:
    """What a cause is keyed on besides its function: values, types, or the symptom."""
    return "values" if symptom in VALUES else "types" if symptom in TYPES else symptom.value


def gap(sig: Signature) -> str:
    """The dtype a signature's node does not take, where that is its defect; else ""."""
    return sig.dtypes[0] if sig.kernel and sig.symptom in GAPS and len(sig.dtypes) == 1 else ""


def _own_node(sig: Signature) -> bool:
    """The node that lacks the dtype is the call's own (`torch.acos` → `Acos`)."""
    return sig.kernel.split("(")[0].lower() == sig.op_name.replace("_", "")


def _name(overload: str) -> str:
    return OpRef(overload).name


def direct(sig: Signature) -> bool:
    """The call is the ATen op itself (`torch.mean` → `aten.mean.dim`), not a
    decomposition whose first node happens to be the signature's overload."""
    name, op = _name(sig.overload).replace("_", ""), sig.op_name.replace("_", "")
    return name == op or op in name  # `F.logsigmoid` is `aten.log_sigmoid`


def _aten_names(cases: Sequence[CaseResult]) -> list[str]:
    names: list[str] = []
    for case in cases:
        for op in case.op.aten_ops if case.op is not None else []:
            name = _name(op)
            if name not in PLUMBING and name not in names:
                names.append(name)
    return names


def culprit(sig: Signature, cases: Sequence[CaseResult], found: Sequence[Found]) -> str:
    """The ATen overload at fault: for a decomposed call, the last of its own ATen ops that
    fails alone the same way (same owner, the same kind of symptom: a wrong value of any
    sort, since a predicate's wrong bool shows as an inf downstream; an input class in
    common, not a dtype: a decomposition casts; called plainly: a keyword argument such as
    `alpha=` or `rounding_mode=` runs other code); the signature's overload for a direct
    call; "" when nothing says which node it is."""
    mine = _aten_names(cases)
    if direct(sig) or sig.symptom is Symptom.MISSING_KERNEL or mine == [_name(sig.overload)]:
        return sig.overload  # the call is one ATen op (`F.interpolate` → upsample_bilinear2d)
    best: tuple[int, bool, str] | None = None
    for other, _ in found:
        name = _name(other.overload)
        if other is sig or not direct(other) or name not in mine or other.owner is not sig.owner \
                or family(other.symptom) != family(sig.symptom) or other.args \
                or not set(other.input_classes) & set(sig.input_classes):
            continue
        rank = (mine.index(name), True, other.overload)
        best = rank if best is None or rank > best else best
    return best[2] if best is not None else ""


def trigger(sig: Signature) -> str:
    """The input class a value defect needs (the most ordinary one it shows on); where an
    error alone shows (an empty input, its dtypes: `signatures.error_triggers`)."""
    if family(sig.symptom) != "values":
        return sig.trigger
    return sig.input_classes[0] if sig.input_classes else ""


def wrong_inputs(found: Sequence[Found]) -> set[tuple[str, str]]:
    """(call, node) pairs whose node rejects float32 as well: every ONNX op on floats takes
    float32, so the lowering wires the wrong tensor there (float `labels` into an index
    input), on every dtype; that is the call's defect, not a dtype gap."""
    return {(s.user_op, s.kernel) for s, _ in found
            if s.symptom is Symptom.INVALID_MODEL and gap(s) == "float32"}


def behaviour(sig: Signature, blame: str, found: Sequence[Found]) -> str:
    """What the function at fault does wrong, as its cause is keyed: the symptom itself
    where it is seen at that function (a direct call, or the direct call of the op it is
    blamed on: NaN dropped and ±inf lost are two fixes, even on one trigger); the symptom's
    family where it is seen only downstream (a predicate's wrong bool shows as an inf), for
    any symptom not about values, and for a kernel (its reports name the op and the input
    it fails on, one fix for whatever that input makes of it)."""
    if sig.symptom not in VALUES or sig.owner is Owner.KERNEL:
        return family(sig.symptom)
    if blame == sig.overload:
        return sig.symptom.value
    if not blame:
        return family(sig.symptom)
    seen = [o.symptom for o, _ in found if o.overload == blame and direct(o)
            and o.owner is sig.owner and family(o.symptom) == family(sig.symptom)
            and set(o.input_classes) & set(sig.input_classes)]
    return sig.symptom.value if sig.symptom in seen else seen[0].value if seen \
        else family(sig.symptom)


def cause_key(sig: Signature, blame: str, provider: str = "", seen: str = "",
              ) -> tuple[str, str]:
    """(key, function) of a signature's cause, given its culprit overload and what that
    does wrong (`behaviour`; the symptom's family by default): a decomposed call whose
    node at fault is not known is its own function, one per mode it is called in
    (`reduction='mean'` and `reduction='sum'` run different nodes); a dtype gap is the
    execution provider's (no kernel) or the translation's (type constraints), per dtype."""
    seen = seen or family(sig.symptom)
    if provider and gap(sig):
        function = PROVIDERS.get(provider, provider) if sig.symptom is Symptom.MISSING_KERNEL \
            else "ONNX type constraints"
        return "|".join((sig.owner.value, function, sig.symptom.value, gap(sig))), function
    if sig.symptom is Symptom.MISSING_KERNEL:
        return f"kernel|{sig.kernel}", sig.kernel
    if sig.owner is Owner.KERNEL and sig.kernel:  # the node type ONNX Runtime raised in
        return "|".join((sig.owner.value, sig.kernel, seen, trigger(sig))), sig.kernel
    if blame:
        function = f"aten_{_name(blame)}" if sig.owner is Owner.TRANSLATION else _name(blame)
        mode = ""
    else:
        function = sig.user_op or sig.overload
        mode = ",".join(a for a in sig.args if "=" in a)
    key = "|".join((sig.owner.value, function, mode, seen, trigger(sig)))
    return key, function


def group(found: Sequence[Found]) -> list[Cause]:
    """The causes of a run's signatures, in the order of their first signature; within a
    cause the direct calls lead (the minimal trigger), then the order found."""
    causes: dict[str, Cause] = {}
    wrong = wrong_inputs(found)
    own = _own_nodes(found, wrong)
    for sig, cases in found:
        blame = culprit(sig, cases, found)
        excluded = bool(gap(sig)) and (sig.user_op, sig.kernel) not in wrong
        listing = excluded and (sig.symptom is Symptom.MISSING_KERNEL or sig.kernel not in own)
        if excluded and not listing:  # one node torchlib emits for dtypes it excludes
            function = f"aten_{_name(blame or sig.overload)}"
            key = "|".join((sig.owner.value, sig.kernel, EXCLUDED))
        else:
            key, function = cause_key(sig, blame, (cases[0].key.provider if cases else "cpu")
                                      if listing else "", behaviour(sig, blame, found))
        cause = causes.setdefault(key, Cause(key, sig.owner, function, blame,
                                             gap(sig) if listing else trigger(sig),
                                             listing=listing))
        cause.members.append((sig, cases))
    for key, cause in causes.items():
        if key.endswith(f"|{EXCLUDED}"):  # its trigger: every dtype its nodes exclude
            dtypes = {d for s, _ in cause.members for d in s.dtypes}
            causes[key] = replace(cause, trigger=",".join(sorted(dtypes, key=_dtype_rank)))
    for cause in causes.values():
        first = cause.members[0][0].symptom
        cause.members.sort(key=lambda m: (not direct(m[0]), m[0].symptom is not first,
                                          cause.listing and not _own_node(m[0]),
                                          _ordinary(m[0])))
    return list(causes.values())


def _own_nodes(found: Sequence[Found], wrong: set[tuple[str, str]]) -> set[str]:
    """The ONNX nodes whose type-constraint gaps are a cause of their own: those torchlib
    emits for an integer or bool dtype they exclude (what IsNaN or Ceil means on integers
    is the lowering's to decide, for every op that emits it). A node excluded only on a
    float dtype (bfloat16 at the exported opset) stays in that dtype's listing: one fix, a
    cast, serves every op listed."""
    return {sig.kernel for sig, _ in found
            if gap(sig) and sig.symptom is Symptom.INVALID_MODEL
            and (sig.user_op, sig.kernel) not in wrong
            and gap(sig).startswith(("int", "uint", "bool"))}


def _dtype_rank(dtype: str) -> tuple[int, str]:
    return (DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER), dtype)


def _ordinary(sig: Signature) -> int:
    """How far from float32 a signature's most ordinary dtype is: a lead shows the cause on
    the dtype a reader expects (not a bfloat16 repro for a defect of every dtype)."""
    order = ("float32", "float64", "float16", "bfloat16")
    return min((order.index(d) for d in sig.dtypes if d in order), default=len(order))


def of(causes: Sequence[Cause]) -> dict[str, Cause]:
    """Signature key → its cause."""
    return {sig.key: c for c in causes for sig, _ in c.members}
