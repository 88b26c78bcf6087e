"""What the exporter's upstream already knows about a finding: typed, never parsed from text.

`OpRef` is the search input: the op a finding pins, from an op-sweep case
(`case.op.op`, `case.op.variant`) or, later, from localising a module failure.
`Signature` is one defect (op, arguments that matter, symptom, owner): the
unit that is searched, drafted and filed. `UpstreamReport` is one searched
signature with its match (only a confident one), the candidates that may be
related, and the case ids it covers; `RunResult.upstream` holds them.
Owners, symptoms and their words are tables here, not branches elsewhere.
"""

from __future__ import annotations

import enum
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Record

# Short names the wording uses: "onnxscript#123", "pytorch#456".
REPO_SHORT = {"microsoft/onnxscript": "onnxscript", "pytorch/pytorch": "pytorch",
              "microsoft/onnxruntime": "onnxruntime"}


@dataclass(frozen=True, config=CONFIG)
class OpRef(Record):
    """The op a finding pins: its ATen overload and where that came from."""

    overload: str               # e.g. "aten.atan2.default"
    variant: str = ""           # the op-sweep variant id, e.g. "atan2" or "sum.dim"
    source: str = "ops"         # "ops" (op sweep) | "localised" (a module failure, issue 11)

    @property
    def name(self) -> str:
        """The op's own name: `aten.sum.dim_IntList` → `sum`, `aten::atan2` → `atan2`."""
        text = self.overload.replace("::", ".")
        parts = [p for p in text.split(".") if p]
        if parts and parts[0] in ("aten", "prims", "torch", "ops"):
            parts = parts[1:]
        return parts[0] if parts else text

    @property
    def key(self) -> str:
        return self.overload


class MatchKind(str, enum.Enum):
    """How far upstream got with it; the order is the ranking's (best first)."""

    OPEN_PR = "open_pr"
    MERGED_PR = "merged_pr"
    OPEN_ISSUE = "open_issue"
    CLOSED_ISSUE = "closed_issue"
    CLOSED_PR = "closed_pr"  # closed without merging


class Owner(str, enum.Enum):
    """Whose code is at fault, read from where the case failed (localisation's answer)."""

    TRANSLATION = "translation"  # the torchlib function that lowers the ATen op
    KERNEL = "kernel"            # an ONNX Runtime kernel (missing, or wrong on a valid graph)
    CAPTURE = "capture"          # torch.export / the legacy tracer, before any ONNX exists
    MODEL = "model"              # the model's own code (a size it fixes): fixed in the repo

    @property
    def route(self) -> Route:
        return ROUTES[self]

    @property
    def upstream(self) -> bool:
        """Whether its defects are filed upstream (the model's own code is not)."""
        return self in ROUTES


@dataclass(frozen=True, config=CONFIG)
class Route(Record):
    """Where an owner's defects are filed, and how that repository titles them."""

    repo: str
    package: str      # the installed distribution the fix ships in (versions compared on it)
    prefix: str       # the repository's title convention
    label: str = ""   # the label its exporter issues carry (searches stay in it)


ROUTES = {
    Owner.TRANSLATION: Route("microsoft/onnxscript", "onnxscript", "[torchlib]"),
    Owner.KERNEL: Route("microsoft/onnxruntime", "onnxruntime", ""),
    Owner.CAPTURE: Route("pytorch/pytorch", "torch", "[ONNX]", "module: onnx"),
}


class Symptom(str, enum.Enum):
    """What a maintainer sees, one defect each: a different symptom is a different report."""

    EXPORT_FAILS = "export_fails"
    UNSUPPORTED = "unsupported"
    INVALID_MODEL = "invalid_model"
    RUN_FAILS = "run_fails"
    MISSING_KERNEL = "missing_kernel"
    CRASH = "crash"
    WRONG_DTYPE = "wrong_dtype"
    WRONG_SHAPE = "wrong_shape"
    NAN_DROPPED = "nan_dropped"
    NAN_INTRODUCED = "nan_introduced"
    SIGNED_ZERO_LOST = "signed_zero_lost"
    OVERFLOW_TO_INF = "overflow_to_inf"
    INF_LOST = "inf_lost"
    LOW_PRECISION = "low_precision"
    WRONG_VALUES = "wrong_values"

    @property
    def info(self) -> SymptomInfo:
        return SYMPTOMS[self]


@dataclass(frozen=True, config=CONFIG)
class SymptomInfo(Record):
    """How a symptom reads in a title and in a body, and the words a report of it uses."""

    title: str                 # "returns a finite value where eager returns NaN"
    words: list[str]           # query terms (OR'ed); phrases quoted by the query builder
    evidence: list[str]        # regexes: a candidate that says one of these talks about it
    raises: bool = False       # the repro fails with an error rather than wrong values
    says: list[str] = field(default_factory=list)  # regexes: it states this direction
    phrase: str = ""           # a title's words, "{got}"/"{eager}" the example's values


_VALUES = ["wrong", "different", "incorrect", "mismatch", "differ"]
# How a report states which side has the NaN: "returns 0 instead of NaN" is a NaN
# dropped; "returns NaN where eager gives 0" is one introduced (the opposite defect).
_NAN_DROPPED = [r"instead of (a )?nan", r"(eager|torch|pytorch|numpy|expected)\W+(returns?|"
                r"gives?|is|outputs?)?\W*nan\b",
                r"nan (is |gets? )?(dropped|lost|ignored|swallowed)",
                r"(ignores?|ignoring|drops?|skips?) nans?\b",
                r"(doesn't|does not|not|never) propagates? nan", r"nan propagation"]
_NAN_INTRODUCED = [r"(returns?|returned|gives?|gave|produces?|outputs?|yields?|becomes?|"
                   r"results? in) (a |all )?nans?\b",
                   r"nans? (instead of|where|while|but) (eager|torch|pytorch|\d|zero|a number)",
                   r"(onnx|ort|onnxruntime|exported)[^.\n]{0,30}"
                   r"\bnans?\b"]
SYMPTOMS = {
    Symptom.EXPORT_FAILS: SymptomInfo("fails to export", ["error", "fails", "exception"],
                                      [r"\berror\b", r"\bfail", r"exception"], True),
    Symptom.UNSUPPORTED: SymptomInfo("has no translation", ["unsupported", "support"],
                                     [r"unsupported", r"not supported", r"no (onnx )?function",
                                      r"\bsupport\b"], True),
    Symptom.INVALID_MODEL: SymptomInfo(
        "produces an invalid model", ["invalid", "ShapeInferenceError", "checker"],
        [r"invalid (model|graph)", r"shapeinferenceerror", r"onnx\.checker", r"check_model",
         r"invalid position", r"fails? to load"], True),
    Symptom.RUN_FAILS: SymptomInfo("produces a model that fails in ONNX Runtime",
                                   ["error", "fails", "onnxruntime"],
                                   [r"\[onnxruntimeerror\]", r"non-zero status", r"runtime error",
                                    r"fails? (at|in|during) (run|inference)"], True),
    Symptom.MISSING_KERNEL: SymptomInfo(
        "has no CPU kernel", ["NOT_IMPLEMENTED", "implementation", "kernel"],
        [r"not_implemented", r"could not find an implementation", r"no kernel",
         r"missing kernel", r"not implemented"], True),
    Symptom.CRASH: SymptomInfo("crashes the process", ["crash", "SIGFPE", "segfault"],
                               [r"crash", r"sigfpe", r"segfault", r"floating point exception",
                                r"core dumped"], True),
    Symptom.WRONG_DTYPE: SymptomInfo("returns the wrong dtype", ["dtype", "type"],
                                     [r"\bdtype\b", r"wrong (output )?type", r"float32.*float16",
                                      r"float16.*float32", r"\bcast\b"],
                                     phrase="returns {got} instead of {eager}"),
    Symptom.WRONG_SHAPE: SymptomInfo("returns the wrong shape", ["shape"],
                                     [r"\bshape\b", r"\brank\b", r"dimension"]),
    Symptom.NAN_DROPPED: SymptomInfo("returns a number where eager returns NaN", ["NaN", "nan"],
                                     [r"\bnan\b", r"not a number"], says=_NAN_DROPPED,
                                     phrase="returns {got} instead of NaN"),
    Symptom.NAN_INTRODUCED: SymptomInfo("returns NaN where eager returns a number",
                                        ["NaN", "nan"], [r"\bnan\b", r"not a number"],
                                        says=_NAN_INTRODUCED,
                                        phrase="returns NaN instead of {eager}"),
    Symptom.SIGNED_ZERO_LOST: SymptomInfo("loses the sign of zero",
                                          ["negative zero", "signed zero", "-0"],
                                          [r"negative zero", r"signed zero", r"sign of (the )?zero",
                                           r"(?<![\w.])-0(\.0)?(?![\w.])"]),
    Symptom.OVERFLOW_TO_INF: SymptomInfo("overflows to inf where eager is finite",
                                         ["inf", "overflow", "infinity"],
                                         [r"\binf\b", r"overflow", r"infinity"],
                                         says=[r"overflow", r"(returns?|gives?|produces?|is)"
                                               r" (\+|-)?inf\b"],
                                         phrase="returns {got} instead of {eager}"),
    Symptom.INF_LOST: SymptomInfo("returns a finite value where eager returns inf",
                                  ["inf", "infinity"], [r"\binf\b", r"infinity"],
                                  says=[r"instead of (\+|-)?inf", r"(eager|torch|expected)\W+"
                                        r"(returns?|gives?|is)?\W*(\+|-)?inf\b",
                                        r"(clips?|clamps?|saturates?) (\+|-)?inf"],
                                  phrase="returns {got} instead of {eager}"),
    Symptom.LOW_PRECISION: SymptomInfo("computes in lower precision than requested",
                                       ["precision", "dtype", "float16"],
                                       [r"precision", r"\bdtype\b", r"float16", r"half"],
                                       phrase="computes {eager} in {got}"),
    Symptom.WRONG_VALUES: SymptomInfo("returns different values", _VALUES,
                                      [rf"\b{w}" for w in _VALUES],
                                      phrase="returns {got} where eager returns {eager}"),
}
# Where a node that does not take a dtype fails (no kernel; type constraints that exclude
# it): one defect per dtype, and one report per dtype lists the nodes (`ops.causes`).
GAPS = frozenset({Symptom.MISSING_KERNEL, Symptom.INVALID_MODEL})
# A report that says one of these (and not this one) describes another defect, never this
# one: the opposite special value, and for a plain wrong number any special value (a NaN
# where eager gives 0 is not the mean of V where eager gives 0).
_SPECIAL_VALUES = (Symptom.NAN_INTRODUCED, Symptom.NAN_DROPPED, Symptom.OVERFLOW_TO_INF,
                   Symptom.INF_LOST)
OPPOSITE = {Symptom.NAN_DROPPED: (Symptom.NAN_INTRODUCED,),
            Symptom.NAN_INTRODUCED: (Symptom.NAN_DROPPED,),
            Symptom.OVERFLOW_TO_INF: (Symptom.INF_LOST,),
            Symptom.INF_LOST: (Symptom.OVERFLOW_TO_INF,),
            Symptom.WRONG_VALUES: _SPECIAL_VALUES,
            # a NaN or an inf from a narrow dtype's overflow is not a computation done narrow
            Symptom.LOW_PRECISION: _SPECIAL_VALUES}
# The words a report uses for the input class a value defect needs (its trigger).
TRIGGER_WORDS = {"empty": [r"\bempty\b", r"zero[- ]size", r"size[- ]?0\b", r"0[- ]size",
                           r"numel\(\)\s*==\s*0", r"no elements", r"shape \(\w*,?\s*0"],
                 "specials": [r"\bnan\b", r"\binf\b", r"infinity", r"-0(\.0)?\b",
                              r"special values?", r"\b(fully|all)[- ]masked"]}
# A dtype gap's trigger is the dtype: the words a report of it uses.
TRIGGER_WORDS |= {"float64": [r"float64", r"\bdouble\b", r"\bfp64\b"],
                  "float32": [r"float32", r"\bfloat\b", r"\bfp32\b"],
                  "float16": [r"float16", r"\bhalf\b", r"\bfp16\b"],
                  "bfloat16": [r"bfloat16", r"\bbf16\b"],
                  **{t: [rf"\b{t}\b"] for t in ("int64", "int32", "int16", "int8", "uint8",
                                                  "bool")}}
TRIGGER_PHRASE = {"empty": "on an empty input", "specials": "", "normal": "", "range": ""}
# The execution provider a case key names, as ONNX Runtime spells it.
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider"}


@dataclass(frozen=True, config=CONFIG)
class Signature(Record):
    """One defect: the op as users call it, the arguments that matter, what goes wrong and
    whose code does it. Every failing case of the sweep that shares these is one report;
    its dtypes and input classes are the scope, its lead case the most ordinary of them."""

    user_op: str                 # torch.atan2, torch.nn.functional.cross_entropy
    overload: str                # the ATen overload the exported graph translated
    symptom: Symptom
    owner: Owner
    args: list[str] = field(default_factory=list)  # the keyword arguments that matter
    kernel: str = ""             # the ONNX node that lacks the dtype: "Cast(19)" (no kernel),
    #                              "Acos" (its type constraints exclude it); the node type
    #                              whose kernel raised or computes a wrong value ("Pad",
    #                              "ReduceMax"); "graph optimizer at ORT_ENABLE_BASIC: Mul"
    #                              (ORT's optimizer, not a kernel); else ""
    lowering: str = ""           # the torchlib function (filled where onnxscript is importable)
    lowering_at: str = ""        # its file:line in the installed package
    variants: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    input_classes: list[str] = field(default_factory=list)
    lead: str = ""               # the case id the repro reproduces
    trigger: str = ""            # where an error alone shows: "empty", or its dtypes

    @property
    def key(self) -> str:
        """What makes two cases one defect (a kernel gap: the ONNX op and the dtype alone;
        a node whose type constraints exclude the dtype: the call and the dtype)."""
        gap = ",".join(self.dtypes) if self.kernel and self.symptom in GAPS else ""
        if self.symptom is Symptom.MISSING_KERNEL:
            return f"kernel|{self.kernel}|{gap}"
        return "|".join((self.owner.value, self.user_op or self.overload, self.overload,
                         ",".join(self.args), self.symptom.value, self.kernel, gap)) \
            + (f"|{self.trigger}" if self.trigger else "")

    @property
    def op_name(self) -> str:
        """The op's short name: `torch.nn.functional.cross_entropy` → `cross_entropy`."""
        return self.user_op.rsplit(".", 1)[-1] if self.user_op else OpRef(self.overload).name


@dataclass(frozen=True, config=CONFIG)
class UpstreamMatch(Record):
    """One upstream issue or pull request a finding was matched to."""

    repo: str          # "microsoft/onnxscript"
    number: int
    title: str
    url: str
    kind: MatchKind
    updated_at: str = ""
    score: float = 0.0
    confident: bool = True   # False: listed as "possibly related", never suppresses a draft
    fixed_in: str | None = None  # a merged fix's first release, newer than the installed one
    why: list[str] = field(default_factory=list)  # what the candidate said that matched

    @property
    def ref(self) -> str:
        return f"{REPO_SHORT.get(self.repo, self.repo)}#{self.number}"


@dataclass(frozen=True, config=CONFIG)
class UpstreamReport(Record):
    """One op's upstream search: the best match, or why there is none."""

    op: OpRef
    cases: list[str] = field(default_factory=list)  # the failing case ids it covers
    match: UpstreamMatch | None = None
    searched: bool = True                # False: not searched (error says why)
    error: str | None = None            # the search failed or stopped (rate limit, ...)
    draft: str | None = None            # path of the drafted report (`--upstream draft`)
    created: str | None = None          # URL of the issue `--upstream create` opened
    signature: Signature | None = None  # the defect searched for (None: an older results file)
    related: list[UpstreamMatch] = field(default_factory=list)  # possibly related, not claimed
    not_drafted: str | None = None      # why no draft was written (the repro did not reproduce)

    def status(self) -> str:
        """The short phrase shown beside a failing case: "known: onnxscript#N, open PR",
        "fixed in onnxscript X.Y: upgrade", "no report found: draft attached"."""
        m = self.match
        if self.created:
            return f"reported: {self.created}"
        if m is None:
            if not self.searched or self.error:
                return f"not searched upstream ({self.error or 'search skipped'})"
            if self.not_drafted:
                return f"no report found; not drafted: {self.not_drafted}"
            return "no report found" + (": draft attached" if self.draft else "")
        if m.kind is MatchKind.MERGED_PR and m.fixed_in:
            return f"fixed in {m.fixed_in}: upgrade ({m.ref})"
        return f"known: {m.ref}, {_KNOWN[m.kind]}"

    def describe(self) -> str:
        """The one phrase the summary, the HTML report and the console show."""
        if self.created:
            return f"reported by parity-gate in {self.created}"
        m = self.match
        if m is None:
            if not self.searched or self.error:
                return f"not searched upstream ({self.error or 'search skipped'})"
            if self.not_drafted:
                return f"no known report; not drafted: {self.not_drafted}"
            return "no known report" + (f" (draft: {self.draft})" if self.draft else "")
        if m.kind is MatchKind.MERGED_PR and m.fixed_in:
            return f"fixed after your version in {m.ref}: upgrade to >= {m.fixed_in}"
        return {
            MatchKind.OPEN_PR: f"being fixed in {m.ref} (open PR)",
            MatchKind.MERGED_PR: f"fixed in {m.ref} (merged): upgrade to a release that has it",
            MatchKind.OPEN_ISSUE: f"reported in {m.ref} (open issue)",
            MatchKind.CLOSED_ISSUE: f"reported in {m.ref} (closed issue): check whether the "
                                    "fix reached your release",
            MatchKind.CLOSED_PR: f"attempted in {m.ref} (closed PR, not merged)",
        }[m.kind]


_KNOWN = {MatchKind.OPEN_PR: "open PR", MatchKind.OPEN_ISSUE: "open issue",
          MatchKind.MERGED_PR: "merged fix: upgrade to a release that has it",
          MatchKind.CLOSED_ISSUE: "closed issue: check whether the fix reached your release",
          MatchKind.CLOSED_PR: "closed PR, not merged"}
