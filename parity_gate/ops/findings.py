"""The findings table: failing op cases grouped by op, input class and outcome.

A function of the RunResult (and the gate's rulings) only. One row says what
an exporter maintainer needs: which op, on which inputs and dtypes, what
went wrong, the worst example values, and whether the float64 re-check
believes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from parity_gate.model.findings import FindingClass, RecheckVerdict, Stage
from parity_gate.model.gate import GateDecision
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import code_span, md_cell, md_text, one_line
from parity_gate.model.upstream import Owner

STATUS_ORDER = ("new", "known", "n/a")


def finding_class(case: CaseResult) -> FindingClass | None:
    """Whose problem a case is: the one rule the table's sections and counts read.

    Eager crashes (SIGFPE in `div.trunc` on int_min / -1), eager answers that depend
    on the memory layout, and mismatches where the exported model is the one that
    matches the reference are eager findings, never exporter ones.
    """
    rc = case.recheck
    quirk = case.op.eager_quirk if case.op is not None else None
    if case.outcome is Outcome.PASS:
        if quirk is not None or (rc is not None and rc.verdict is RecheckVerdict.EAGER_OFF):
            return FindingClass.EAGER
        if rc is not None and rc.verdict is RecheckVerdict.ILL_CONDITIONED:
            return FindingClass.ILL_CONDITIONED
        return None
    if not case.failed:
        return None
    if case.outcome is Outcome.UNSUPPORTED_OP:
        return FindingClass.UNSUPPORTED
    if case.outcome is Outcome.NO_KERNEL:
        return FindingClass.RUNTIME
    if case.lost is not None and case.lost.step.stage is Stage.EAGER:
        return FindingClass.EAGER
    if rc is not None and rc.verdict is RecheckVerdict.EAGER_OFF:
        return FindingClass.EAGER
    if rc is not None and rc.definition is not None and rc.definition.owner is Owner.KERNEL:
        return FindingClass.RUNTIME  # the graph computes eager's answer by definition
    raised = case.op.raised if case.op is not None else None
    if case.outcome is Outcome.RUNTIME_ERROR and raised is not None \
            and raised.owner is Owner.KERNEL:
        return FindingClass.RUNTIME  # ONNX Runtime raises on a graph ONNX defines
    return FindingClass.EXPORTER


def class_counts(run: RunResult) -> dict[str, int]:
    """Cases per finding class, in FindingClass order (the closing-note figures)."""
    counts = dict.fromkeys((c.words for c in FindingClass), 0)
    for case in run.cases:
        found = case.op.finding_class if case.op is not None else None
        if found is not None:
            counts[found.words] += 1
    return counts


@dataclass(frozen=True)
class Row:
    """One finding: one variant failing one way, on some input classes and dtypes."""

    variant: str
    op: str  # the user-level op (torch.isfinite), with the ATen overload in `aten`
    family: str
    input_classes: tuple[str, ...]
    outcome: str
    dtypes: tuple[str, ...]
    effect: str
    example: str
    recheck: str
    status: str  # new | known | n/a (no gate)
    cases: tuple[str, ...]
    slug: str = ""
    dtype: str = ""  # of the example case (the repro's dtype)
    aten: str = ""  # the ATen overload beside `op`
    finding: str = FindingClass.EXPORTER.value

    @property
    def input_class(self) -> str:
        """The input class the example (and the repro) comes from."""
        return self.input_classes[0]

    def line(self) -> str:
        """One line for the console and the closing summary."""
        return (f"{self.op or self.variant} ({self.aten}) [{self.variant}] "
                f"{'+'.join(self.input_classes)} "
                f"{','.join(self.dtypes)}: {self.outcome} — {self.effect}"
                + (f" (re-check: {self.recheck})" if self.recheck else ""))


_NODE = re.compile(r"\b(node_\w+|val_\w+|c\d+_\w+)")
_PAREN = re.compile(r"\([^()]*\)")
_NUMBER = re.compile(r"[-+]?\d[\d.]*(?:e[-+]?\d+)?")


def effect_key(case: CaseResult) -> str:
    """What a case's failure looks like with the particulars (node names, counts) removed,
    so cases failing the same way in different batches group together."""
    worst = case.worst()
    if worst is not None and not worst.passed and case.outcome.value == "mismatch":
        kinds = sorted(worst.nonfinite)
        return f"{worst.name}: {worst.verdict.value} {' '.join(kinds)}".strip()
    text = case.reason.split(" Signature:")[0]  # type unions print unordered
    text = _PAREN.sub("", _PAREN.sub("", _NODE.sub("#", text)))
    return " ".join(_NUMBER.sub("#", text).split())[:160]


def effect(case: CaseResult, limit: int = 220) -> str:
    """The failure in words: the reason, and the graph's low-precision node if the audit
    found one (the float64 re-check is a column of its own)."""
    low = case.op.low_precision if case.op is not None else None
    parts = [case.reason, low.describe() if low is not None else ""]
    if low is not None and low.hidden_by_provider:  # the graph is the finding: say it first
        parts.reverse()
    return " ".join(" | ".join(p for p in parts if p).split())[:limit]


def _example(case: CaseResult) -> str:
    if case.op is not None and case.op.eager_quirk is not None:
        return case.op.eager_quirk.describe()
    ex = case.op.example if case.op is not None else None
    return ex.describe() if ex is not None else ""


def _recheck(case: CaseResult) -> str:
    rc = case.recheck
    parts = [rc.verdict.value] if rc is not None else []
    if rc is not None and rc.unoptimized is not None and rc.unoptimized.vanishes:
        parts.append("vanishes with ORT optimizations off")
    if rc is not None and rc.definition is not None and rc.definition.owner is not None:
        parts.append(f"{rc.definition.owner.value} by {rc.definition.oracle}")
    raised = case.op.raised if case.op is not None else None
    if raised is not None and raised.owner is not None:
        parts.append(f"{raised.owner.value}: {raised.describe()}")
    if case.op is not None and case.op.low_precision is not None:
        parts.append("graph computes in lower precision")
    return "; ".join(parts)


def rows(run: RunResult, decision: GateDecision | None = None) -> list[Row]:
    """Failing cases grouped by (variant, outcome, effect); worst input class/dtype first."""
    status = _statuses(decision)
    groups: dict[tuple[str, str, str], list[CaseResult]] = {}
    for case in run.cases:
        if not case.failed and finding_class(case) is not FindingClass.EAGER:
            continue  # passing cases appear only as eager findings (quirk, eager off)
        variant = case.op.variant if case.op is not None else case.key.module
        key = (variant, case.outcome.value, effect_key(case))
        groups.setdefault(key, []).append(case)
    out: list[Row] = []
    slugs: set[str] = set()
    for (variant, outcome, _), cases in sorted(groups.items()):
        cases.sort(key=lambda c: (_CLASS_ORDER.get(c.key.inputs, 9), _dtype_rank(c.key.dtype)))
        first = cases[0]
        ids = tuple(c.id for c in cases)
        slug = f"{variant}__{outcome}"
        n = 2
        while slug in slugs:
            slug, n = f"{variant}__{outcome}_{n}", n + 1
        slugs.add(slug)
        found = finding_class(first)
        out.append(Row(
            variant=variant, op=(first.op.user_op or first.op.op) if first.op else "",
            aten=first.op.op if first.op else "",
            finding=found.value if found is not None else FindingClass.EXPORTER.value,
            family=first.op.family if first.op else "",
            input_classes=tuple(dict.fromkeys(c.key.inputs for c in cases)), outcome=outcome,
            dtypes=tuple(sorted({c.key.dtype for c in cases}, key=_dtype_rank)),
            effect=effect(first), example=_example(first), recheck=_recheck(first),
            status=_row_status(ids, status), cases=ids, slug=slug, dtype=first.key.dtype))
    out.sort(key=lambda r: (r.family, r.variant, r.outcome))
    return out


_CLASS_ORDER = {"specials": 0, "normal": 1, "empty": 2}
_DTYPE_ORDER = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8",
                "uint8", "bool")


def _dtype_rank(dtype: str) -> int:
    return _DTYPE_ORDER.index(dtype) if dtype in _DTYPE_ORDER else len(_DTYPE_ORDER)


def _statuses(decision: GateDecision | None) -> dict[str, str] | None:
    if decision is None or decision.baseline is None:
        return None
    return {r.id: "new" if r.category == "regression" else r.category for r in decision.rulings}


def _row_status(ids: Iterable[str], status: dict[str, str] | None) -> str:
    if status is None:
        return "n/a"
    seen = {status.get(i, "known") for i in ids}
    return "new" if "new" in seen else "known"


_KERNEL = re.compile(r"implementation for (\w+\(\d+\))")
_MISSING = re.compile(r"unsupported operator ([\w.:]+)")
SECTIONS = ("exporter", "eager", "unsupported", "runtime")


def section(row: Row) -> str:
    """Exporter bugs first; eager's own findings, feature requests and provider gaps apart."""
    return {FindingClass.UNSUPPORTED.value: "unsupported", FindingClass.RUNTIME.value: "runtime",
            FindingClass.EAGER.value: "eager"}.get(row.finding, "exporter")


def _grouped(rows: list[Row], pattern: re.Pattern[str]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        m = pattern.search(r.effect)
        out.setdefault(m.group(1) if m else r.effect[:80], []).append(r)
    return dict(sorted(out.items()))


def _dtypes_of(rows: list[Row]) -> str:
    return ", ".join(sorted({d for r in rows for d in r.dtypes}, key=_dtype_rank))


def _variants_of(rows: list[Row]) -> str:
    return ", ".join(_code(v) for v in dict.fromkeys(r.variant for r in rows))


def _code(text: str) -> str:
    """A table cell's code span: kept as typed (GitHub acts on no `@` or `#` in code, so a
    case id stays pasteable), fenced past any backtick, controls and bidi removed."""
    return code_span(text, table=True)


def summary_lines(table: list[Row]) -> list[str]:
    """The findings, one line each: exporter rows, then one line per missing op/kernel."""
    lines = [f"[{r.status}] {one_line(r.line())}" for r in table if section(r) == "exporter"]
    lines += [f"[eager] {one_line(r.line())}" for r in table if section(r) == "eager"]
    for op, rows in _grouped([r for r in table if section(r) == "unsupported"],
                             _MISSING).items():
        lines.append(one_line(f"[unsupported] {op}: "
                              f"{', '.join(dict.fromkeys(r.variant for r in rows))}"))
    for kernel, rows in _grouped([r for r in table if section(r) == "runtime"],
                                 _KERNEL).items():
        lines.append(one_line(f"[no kernel] {kernel} on {_dtypes_of(rows)}: "
                              f"{', '.join(dict.fromkeys(r.variant for r in rows))}"))
    return lines


def render(run: RunResult, table: list[Row], decision: GateDecision | None,
           repro_dir: str | None = None) -> str:
    """findings.md (and the job summary): every text from the results file goes through
    `model.text`, since `ops --from` renders shards another job wrote."""
    counts = ", ".join(f"{k}: {v}" for k, v in run.counts().items())
    versions = md_text(", ".join(f"{k} {run.versions[k]}" for k in (
        "torch", "onnxscript", "onnx", "onnxruntime") if k in run.versions))
    new = sum(1 for r in table if r.status == "new")
    verdict = "✅" if decision is None or decision.passed else "❌"
    head = f"## {verdict} parity-gate ops: {len(table)} findings ({new} new) in " \
        f"{len(run.cases)} cases"
    if run.interrupted:  # never a pass: the cases that did not run may hold findings
        head = (f"## ⚠️ parity-gate ops: interrupted — {len(run.cases)} of "
                f"{run.verdict.planned} planned cases finished; {len(table)} findings "
                f"({new} new) among them")
    lines = [head, "",
             f"**Outcomes:** {counts} · **Time:** {run.duration_s:.0f}s",
             f"**Versions:** {versions}", ""]
    if not table:
        return "\n".join([*lines, "No findings: every applicable case matches eager.", ""])
    exporter = [r for r in table if section(r) == "exporter"]
    classes = ", ".join(f"{k}: {v}" for k, v in class_counts(run).items())
    lines += [f"**Cases by finding class:** {classes}", ""]
    for title, part in (("Exporter findings", exporter),
                        ("Eager findings: crashes, layout-dependent values, eager off the "
                         "reference (not exporter bugs)",
                         [r for r in table if section(r) == "eager"])):
        if not part and title != "Exporter findings":
            continue
        lines += [f"### {title} ({len(part)})", "",
                  "| status | op | ATen | variant | input classes | dtypes | outcome | effect | "
                  "worst example | re-check | repro |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(part, key=lambda r: (STATUS_ORDER.index(r.status), r.family,
                                             r.variant, r.outcome)):
            repro = _code(f"{repro_dir}/{r.slug}.py") if repro_dir else ""
            lines.append(
                f"| {r.status} | {_code(r.op)} | {_code(r.aten)} | {_code(r.variant)} | "
                f"{md_cell(', '.join(r.input_classes))} | {md_cell(', '.join(r.dtypes))} | "
                f"**{md_text(r.outcome)}** | "
                f"{md_cell(r.effect, 200)} | {md_cell(r.example, 120)} | "
                f"{md_cell(r.recheck, 80)} | {repro} |")
        lines.append("")
    missing = _grouped([r for r in table if section(r) == "unsupported"], _MISSING)
    if missing:
        lines += ["", f"### Unsupported by the exporter: feature requests ({len(missing)} ops)",
                  "", "| missing translation | variants | dtypes |", "|---|---|---|"]
        lines += [f"| {_code(op)} | {_variants_of(rows)} | {md_cell(_dtypes_of(rows))} |"
                  for op, rows in missing.items()]
    kernels = _grouped([r for r in table if section(r) == "runtime"], _KERNEL)
    if kernels:
        lines += ["", f"### No kernel on this provider: valid graphs the runtime cannot run "
                  f"({len(kernels)} kernels)", "",
                  "| ONNX op (opset) | dtypes | variants |", "|---|---|---|"]
        lines += [f"| {_code(k)} | {md_cell(_dtypes_of(rows))} | {_variants_of(rows)} |"
                  for k, rows in kernels.items()]
    lines.append("")
    return "\n".join(lines)
