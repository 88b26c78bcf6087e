"""The hazard rules: one declarative table, one record per known export pitfall.

A rule names its check by function name in `parity_gate.hazards.checks` (resolved
only where the checks run, so the manifest can import this table without torch)
and its test pair: a module in `tests/data/hazards/pairs.py` that triggers it and
a fixed twin that does not. Adding a rule is one record here, one check function
and one pair there; the manifest key, the README table and the tests follow.

`claims` are patterns of exporter warnings this rule explains: a warning one rule
claims is reported by that rule (with its fix) rather than again by
`exporter-warnings`, which reports every other warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parity_gate.model.hazards import Action, Severity

Exporter = Literal["dynamo", "torchscript"]
BOTH: tuple[Exporter, ...] = ("dynamo", "torchscript")


@dataclass(frozen=True)
class Rule:
    """One pitfall: what it is, how bad, what the gate does by default, how to fix it."""

    id: str
    title: str
    severity: Severity
    action: Action
    fix: str
    check: str = ""       # checks.<name>(ctx) after a successful export; "" for none
    on_failure: str = ""  # checks.<name>(ctx) on the export's error text; "" for none
    pair: tuple[str, str] = ("", "")  # (trigger, fixed twin) in tests/data/hazards/pairs.py
    exporters: tuple[Exporter, ...] = BOTH
    claims: tuple[str, ...] = ()  # regexes of exporter warnings this rule reports

    def __post_init__(self) -> None:
        if not (self.check or self.on_failure):
            raise ValueError(f"{self.id}: a rule needs a check or an on_failure check")
        if not all(self.pair):
            raise ValueError(f"{self.id}: a rule needs a test pair (trigger, fixed twin)")

    @property
    def field(self) -> str:
        return self.id.replace("-", "_")


RULES: tuple[Rule, ...] = (
    Rule("training-mode", "the factory returned the module (or a submodule) in training mode",
         Severity.WARNING, Action.WARN,
         "return the module in eval mode (call .eval() in the factory or before any export); "
         "dropout and batch-norm batch statistics are captured otherwise",
         check="training_mode", pair=("TrainingModeNet", "TrainingModeNetFixed"),
         claims=(r"Exporting a model while it is in training mode",
                 r"is set to TrainingMode\.TRAINING")),
    Rule("baked-dim", "a dynamic dim became a literal in a Reshape/Expand/Slice of the graph",
         Severity.ERROR, Action.WARN,
         "derive sizes from the tensor (x.shape[0], flatten(start_dim=1), -1) instead of "
         "Python numbers, so the graph computes them per input",
         check="baked_dim", pair=("BakedBatch", "BakedBatchFixed")),
    Rule("python-control-flow", "the traced graph depends on a Python value or branch",
         Severity.WARNING, Action.WARN,
         "keep values as tensors (torch.where instead of if, no .item()/int()/len() of a "
         "tensor), or express real branches with torch.cond under the dynamo exporter",
         check="python_control_flow", on_failure="python_control_flow_failure",
         pair=("PythonBranch", "PythonBranchFixed"),
         claims=(r"TracerWarning: (Converting a tensor to a Python|Iterating over a tensor|"
                 r"Using len to get tensor shape|There are \d+ live references)",)),
    Rule("in-place", "forward writes in place to an input or to module state",
         Severity.WARNING, Action.WARN,
         "compute out of place (out = out + residual, x.relu() not x.relu_()) and keep "
         "running state out of forward; the exported graph cannot mutate its inputs or weights",
         check="in_place", pair=("InPlaceInput", "InPlaceInputFixed"),
         claims=(r"Removing mutation from node", r"in-place operation")),
    Rule("constants-in-forward", "forward builds tensors or draws random numbers",
         Severity.WARNING, Action.WARN,
         "register fixed tensors as buffers in __init__ (self.register_buffer) and move "
         "random draws out of forward (or seed them as inputs)",
         check="constants_in_forward", pair=("ConstantsInForward", "ConstantsInForwardFixed"),
         claims=(r"torch\.tensor results are registered as constants",)),
    Rule("opset-too-new", "the model's opset or IR version is newer than the target runtime",
         Severity.ERROR, Action.FAIL,
         "export with an older opset (export.opset) or raise the target runtime; the "
         "runtime refuses models stamped newer than it implements",
         check="opset_too_new", pair=("OpsetTarget", "OpsetTargetFixed")),
    Rule("opset-not-honoured", "the exported model's opset is not the one export.opset asked for",
         Severity.ERROR, Action.FAIL,
         "ask for an opset the exporter produces (the dynamo exporter translates at opset 18 "
         "and converts down only as far as onnxscript's version converter reaches), or use "
         "exporter: torchscript for an older opset; a runtime pinned to the asked opset "
         "would refuse this model",
         check="opset_not_honoured", pair=("OpsetIgnored", "OpsetIgnoredFixed")),
    Rule("precision-cast", "an op is computed in lower precision than the program asked for",
         Severity.ERROR, Action.WARN,
         "apply the upcast before the op (x.float().sum() or sum(dtype=...) on a translation "
         "that casts first); report the exporter's translation upstream",
         check="precision_cast", pair=("NarrowGelu", "NarrowGeluFixed"),
         exporters=("dynamo",)),
    Rule("unsupported-op", "the exporter has no translation for an operator",
         Severity.ERROR, Action.WARN,
         "use the opset or exporter named in the message, or register a custom translation "
         "(custom_translation_table / a symbolic) or rewrite the op with supported ones",
         on_failure="unsupported_op", pair=("UnsupportedOp", "UnsupportedOpFixed")),
    Rule("exporter-warnings", "the exporter warned while exporting",
         Severity.INFO, Action.WARN,
         "read each warning: the exporter says when it substituted or dropped something",
         check="exporter_warnings", pair=("WarningNet", "WarningNetFixed")),
    Rule("eager-mismatch-by-design", "forward branches on whether it is being exported",
         Severity.WARNING, Action.WARN,
         "make both branches compute the same thing, or test the exported branch on purpose; "
         "the gate compares the exported branch against eager's other branch",
         check="eager_mismatch_by_design", pair=("ExportBranch", "ExportBranchFixed")),
    Rule("dynamic-dim-specialised", "torch.export fixed a dim declared dynamic to a constant",
         Severity.ERROR, Action.WARN,
         "remove what ties the dim to the example's size (a literal reshape, a size check, a "
         "loop over it) or declare the dim static",
         check="dynamic_dim_specialised", on_failure="dynamic_dim_specialised_failure",
         pair=("SpecialisedDim", "SpecialisedDimFixed"), exporters=("dynamo",)),
    Rule("unchecked-size-assumption", "the exported program assumes a size equality on a "
         "dynamic dim that nothing checks at run time",
         Severity.ERROR, Action.WARN,
         "declare those dims static (and export per size), or make the op independent of the "
         "size (adaptive pooling to 1 is a mean: `x.mean((2, 3), keepdim=True)`); test the "
         "sizes you serve as fixture sets: the gate compares each against eager",
         check="unchecked_size_assumption", pair=("AdaptivePool", "AdaptivePoolGlobal"),
         exporters=("dynamo",)),
    Rule("tf32-reference", "TF32 is on while eager computes the float32 reference on CUDA",
         Severity.WARNING, Action.WARN,
         "do not turn TF32 on in the factory or at import of its modules "
         "(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, "
         "torch.set_float32_matmul_precision('high')): set it where you serve, so the gate "
         "compares against full float32; or use reference_device: cpu",
         check="tf32_reference", pair=("TF32Reference", "TF32ReferenceFixed")),
)

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
RULE_IDS: tuple[str, ...] = tuple(BY_ID)
