"""Drafts for a model run's localised defects: the culprit's verified node repro is the repro.

Localisation cut the culprit's ONNX nodes out of the exported model, fed them the
values they saw, made the one eager call, and kept the folder only where its
`repro.py` exits 1. That folder (a few small arrays and one node's graph, never
the user's model) is what a maintainer needs: the draft shows its script and
the output of running it again here, and the folder is attached beside the
draft. No node repro, or one that no longer reproduces: no draft, and the
report says why. Every value from the run passes the neutraliser on its way in.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from parity_gate.engine import sandbox
from parity_gate.github import drafts
from parity_gate.github.upstream import UpstreamOptions, _replace, fingerprint, issue_url
from parity_gate.model.files import copy_file, make_folder, own_folder_problem
from parity_gate.model.findings import Example
from parity_gate.model.localisation import Culprit
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import code_block, code_span, md_link, md_text, one_line
from parity_gate.model.upstream import OpRef, Owner, Signature, UpstreamReport

FILES = ("model.onnx", "inputs.npz", "args.npz", "expected.npz", "reference.npz", "case.json",
         "repro.py")
CLASSES = {"normal": "ordinary values", "specials": "NaN or ±inf among them",
           "empty": "an empty tensor among them"}
HOW_FOUND = ("Found by exporting a model with `torch.onnx.export(..., dynamo=True)`, "
             "comparing ONNX Runtime with eager, and localising the difference to the first "
             "node whose inputs agree with eager and whose output does not; its ONNX nodes "
             "alone, fed the values they saw, show it (the repro above).")


def prepare(run: RunResult, reports: list[UpstreamReport],
            found: list[tuple[Signature, list[CaseResult]]], options: UpstreamOptions,
            ) -> tuple[list[UpstreamReport], drafts.Drafted]:
    """Drafts for the searched, unmatched localised signatures whose node repro still
    reproduces (exit 1; every one with `verify` off); the others say why not."""
    cases = {sig.key: cs for sig, cs in found}
    out: list[UpstreamReport] = []
    drafted: drafts.Drafted = {}
    for r in reports:
        sig = r.signature
        if r.match is not None or not r.searched or sig is None or sig.key not in cases:
            out.append(r)
            continue
        lead = cases[sig.key][0]
        folder, output, why = _checked(lead, options.verify, options.results_dir)
        if folder is None:
            out.append(_replace(r, not_drafted=why))
            continue
        assert lead.localisation is not None and lead.localisation.culprit is not None
        drafted[sig.key] = (sig.owner.route.repo, drafts.title(sig, example=printed(output)),
                            body(sig, run, lead.localisation.culprit, folder, output, r))
        out.append(r)
    return out, drafted


# The node repro's line for its worst element: "worst at (0, 1): eager np.float32(0.0)
# onnxruntime np.float32(-0.3896045)".
_WORST = re.compile(r"worst at \([\d, ]*\): eager (?:np\.\w+\()?([^\s)]+)\)? "
                    r"onnxruntime (?:np\.\w+\()?([^\s)]+)\)?")


def printed(output: str) -> Example | None:
    """The worst element the verified node repro printed, for the title to quote what the
    reader's run of it shows ("returns -0.3896 where eager returns 0")."""
    found = _WORST.search(output)
    if found is None:
        return None
    value = {"np.True_": "True", "np.False_": "False"}
    eager, onnx = (value.get(v, v) for v in found.groups())
    return Example("o0", [], eager, onnx)


def _checked(lead: CaseResult, verify: bool, results_dir: Path | None
             ) -> tuple[Path | None, str, str]:
    """(the node repro's folder, what running it printed, why there is none). The repro is
    code from a results file: it is found only inside that run's out folder (never through a
    link), and run in the sandbox the model workers use, with no credential in its
    environment."""
    loc = lead.localisation
    if loc is None or not loc.node_repro:
        return None, "", ("no node-level repro of the culprit was kept (the model-level "
                          "repro holds the whole model: not for an upstream report)")
    folder = repro_folder(loc.node_repro, results_dir)
    if folder is None:
        return None, "", (f"the node repro {loc.node_repro} is not in the run's out folder "
                          f"{results_dir or '(unknown)'}; only a repro there is read or run")
    if not verify:
        return folder, "", ""
    done = sandbox.run([sys.executable, "repro.py"], folder, 300, None, stdout=True)
    printed = done.stderr.strip()
    if done.returncode is None:
        return None, "", "the node repro did not finish in 300 s here"
    if done.returncode != 1:
        return None, "", (f"the node repro exits {done.returncode} here, not 1: "
                          f"{one_line(printed)[:200] or 'no output'}")
    return folder, printed, ""


def repro_folder(recorded: str, results_dir: Path | None) -> Path | None:
    """The repro folder a results file records, inside that run's out folder: the path as
    recorded (relative to where the run started, or absolute) or its tail below the out
    folder (`parity-reports/artifacts/x` → `OUT/artifacts/x`: the results copied or
    downloaded elsewhere), whichever lies inside it; None when none does, or a link is on
    the way."""
    if results_dir is None:
        return None
    root = results_dir.resolve()
    path = Path(recorded)
    parts = path.parts[1:] if path.is_absolute() else path.parts
    candidates = [path, *(root.joinpath(*parts[k:]) for k in range(len(parts)))]
    for candidate in candidates:
        script = candidate / "repro.py"
        if script.is_file() and not script.is_symlink() \
                and not own_folder_problem(candidate, root, inside=True):
            return Path(os.path.abspath(candidate))
    return None


def _what(sig: Signature, culprit: Culprit) -> str:
    op = sig.user_op or sig.overload
    options = ", ".join(f"{k}: {v}" for k, v in culprit.options.items())
    fed = ", ".join(CLASSES.get(c, c) for c in sig.input_classes)
    trigger = "; ".join(p for p in (f"options set: {options}" if options else "",
                                    f"inputs: {fed}" if fed else "") if p)
    return (f"{code_span(op)} exported with {code_span('torch.onnx.export(..., dynamo=True)')} "
            f"{md_text(sig.symptom.info.title)} when run in ONNX Runtime "
            f"({code_span('CPUExecutionProvider')}). The model calls it as "
            f"{code_span(culprit.code or culprit.call)}; the exported program's node is "
            f"{code_span(culprit.call)}."
            + (f"\n\nTrigger: {md_text(trigger)}." if trigger else "")
            + f" Affected dtypes: {md_text(', '.join(sig.dtypes))}.")


def body(sig: Signature, run: RunResult, culprit: Culprit, folder: Path, output: str,
         report: UpstreamReport) -> str:
    """The report: what, the repro (its script; the folder is attached), expected vs
    actual with the repro's output, the nodes, whose code, versions, related."""
    files = ", ".join(code_span(f) for f in FILES if (folder / f).is_file() and f != "repro.py")
    repro = (f"The ONNX nodes {code_span(culprit.aten)} became, cut out of the exported model "
             f"and fed the values they saw, beside the one eager call (attached: {files}). "
             f"{code_span('python repro.py')} exits 1 when it reproduces.\n\n"
             f"{code_block((folder / 'repro.py').read_text(encoding='utf-8'), 'python')}")
    actual = (f"Expected: ONNX Runtime returns what eager returns; actual: it "
              f"{md_text(sig.symptom.info.title)}.\n\nOutput of the repro:\n\n"
              f"{code_block(output or '(not run)')}")
    where = md_text(culprit.owned_by or sig.owner.value)
    related = "\n".join(f"- {md_link(m.title[:100], issue_url(m.repo, m.number))} "
                        f"({m.kind.value.replace('_', ' ')}; {md_text('; '.join(m.why))})"
                        for m in report.related)
    versions = "\n".join(f"- {name}: {md_text(run.versions[name])}"
                         for name in drafts.VERSIONS if name in run.versions)
    head = "Describe the issue" if sig.owner is Owner.KERNEL else "🐛 Describe the bug"
    sections = [(head, _what(sig, culprit)), ("Repro", repro), ("Expected vs actual", actual),
                ("ONNX nodes involved", md_text(", ".join(culprit.onnx_nodes) or "-")),
                ("Where the defect lives", where), ("Versions", versions)]
    if related:
        sections.append(("Possibly related", related))
    sections.append(("How it was found", md_text(HOW_FOUND)))
    text = "\n\n".join(f"### {h}\n\n{b}" for h, b in sections)
    return f"{text}\n\n<!-- {fingerprint(sig)} -->\n"


def attach(reports: list[UpstreamReport], found: list[tuple[Signature, list[CaseResult]]],
           results_dir: Path | None = None) -> None:
    """Beside each written draft of a localised defect, its node repro's files
    (`<draft>.repro/`), so that "draft attached" holds what the repro reads: from the same
    folder the draft was made from (inside the results' out folder)."""
    leads = {sig.key: cs[0] for sig, cs in found}
    for r in reports:
        sig = r.signature
        lead = leads.get(sig.key) if sig is not None else None
        loc = lead.localisation if lead is not None else None
        if r.draft is None or loc is None or not loc.node_repro:
            continue
        folder = repro_folder(loc.node_repro, results_dir)
        if folder is None:
            continue
        target = Path(r.draft).with_suffix(".repro")
        make_folder(target.parent, target)
        for name in FILES:
            if (folder / name).is_file() and not (folder / name).is_symlink():
                copy_file(folder / name, target / name)


def unowned_reports(cases: Mapping[str, list[CaseResult]], why: Mapping[str, str]
                    ) -> list[UpstreamReport]:
    """A localised failure whose owner is unknown: listed, not searched, and why."""
    return [UpstreamReport(op=OpRef(aten, source="localised"), cases=[c.id for c in cs],
                           searched=False, error=f"owner unknown: {why[aten]}"[:300])
            for aten, cs in cases.items()]
