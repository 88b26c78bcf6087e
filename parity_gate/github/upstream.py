"""Search upstream before reporting anything; draft or open what is new, one report per defect.

The unit is a defect signature (`ops.signatures`): the op as users call it, the
arguments that matter, the symptom and the owner. Each is searched where its
owner's defects are filed (and where users report exporter bugs), with the op
and the symptom in the query. Candidates are read, not matched on a title word:
a claim needs the op named as code (a call, `aten::op`, the torchlib function),
the symptom described and the arguments that matter; an "Implement X" or "Add
X" pull request introduces an op and never fixes it; a merged fix counts only
when its release is newer than the installed one. Anything less is listed in
the draft as possibly related and never suppresses it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import TypeAdapter, ValidationError

from parity_gate.github.client import BudgetSpent, GitHubClient, GitHubError, RateLimited
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import code_span, github_url, md_cell, md_link
from parity_gate.model.upstream import (
    OPPOSITE,
    ROUTES,
    TRIGGER_WORDS,
    MatchKind,
    OpRef,
    Owner,
    Signature,
    Symptom,
    UpstreamMatch,
    UpstreamReport,
)
from parity_gate.ops import causes, localised, signatures

KINDS = ("issue", "pr")
STATE_SCORE = {MatchKind.OPEN_PR: 3.0, MatchKind.MERGED_PR: 2.5, MatchKind.OPEN_ISSUE: 2.0,
               MatchKind.CLOSED_ISSUE: 1.0, MatchKind.CLOSED_PR: 0.5}
FINGERPRINT_PREFIX = "parity-gate-finding"
# Where a defect of each owner may already be reported: its own repository first; users
# report exporter bugs in pytorch/pytorch (label "module: onnx") whoever owns the code; a
# kernel's difference is often reported, and worked around, in torchlib (a NaN MaxPool
# drops), and that fix is the user's upgrade.
SEARCHED = {
    Owner.TRANSLATION: ((ROUTES[Owner.TRANSLATION], KINDS), (ROUTES[Owner.CAPTURE], ("issue",))),
    Owner.CAPTURE: ((ROUTES[Owner.CAPTURE], KINDS),),
    Owner.KERNEL: ((ROUTES[Owner.KERNEL], KINDS), (ROUTES[Owner.TRANSLATION], KINDS)),
}
SEARCHED_REPOS = frozenset(r.repo for r in ROUTES.values())
# A title that introduces an op (the PR that added it, a feature request), not a fix.
_INTRODUCES = re.compile(r"^\W*(?:\[[^\]]*\]\s*)*(?:implement|add|support|enable|introduce|"
                         r"register|create|port)\b", re.IGNORECASE)
_FIXES = re.compile(r"\b(?:fix|fixes|fixed|correct|handle|wrong|incorrect|bug|mismatch|"
                    r"regression|broken)\b", re.IGNORECASE)
_VERSION = re.compile(r"v?(\d+\.\d+(?:\.\d+)?)")


# ---- which findings are reported


def op_findings(run: RunResult) -> list[tuple[Signature, list[CaseResult]]]:
    """The run's defect signatures with their cases (lead case first): the op sweep's
    failing cases, and a model run's failures that localisation pinned to an op."""
    return signatures.group(run) + localised.group(run)


def op_ref(sig: Signature, cases: list[CaseResult]) -> OpRef:
    if cases and cases[0].op is None:  # a model's failure, localised to this op
        return OpRef(overload=sig.overload, source="localised")
    variant = cases[0].op.variant if cases and cases[0].op is not None else ""
    return OpRef(overload=sig.overload, variant=variant, source="ops")


def fingerprint(sig: Signature) -> str:
    """Stable id of a defect, written into the report it opens (an HTML comment)."""
    return f"{FINGERPRINT_PREFIX}-{hashlib.sha256(sig.key.encode()).hexdigest()[:12]}"


def own_fingerprint(text: str) -> str | None:
    """The fingerprint a drafted report carries: one per root cause, shared by the
    signatures it covers, so one issue is opened for all of them."""
    found = re.search(rf"<!-- ({FINGERPRINT_PREFIX}-[0-9a-f]{{12}}) -->", text)
    return found.group(1) if found else None


# ---- searching


def kernel_op(sig: Signature) -> str:
    """The ONNX op a kernel defect is in, as ONNX Runtime's reports name it: `Atan` of
    "Atan(7)", `ReduceMax` of "ReduceMax on CPUExecutionProvider"; "" for an optimizer's
    defect or none."""
    if sig.owner is not Owner.KERNEL or not sig.kernel or sig.kernel.startswith(OPTIMIZER):
        return ""
    return sig.kernel.split("(")[0].split(" ")[0]


def op_terms(sig: Signature, function: str = "") -> list[str]:
    """How the owner's reports name the defect's code, most specific first: a kernel by its
    ONNX op (then the op users call); a translation by the op, its torchlib function
    (`aten_mean`, the cause's `function`) and `aten::name`; a capture by the op and
    `aten::name`; a name of several words also as plain words ("take along dim")."""
    name = sig.op_name
    kernel = kernel_op(sig)
    if sig.symptom is Symptom.MISSING_KERNEL and kernel:
        return [kernel]
    out = [kernel] if kernel else []
    out.append(name)
    if sig.owner is Owner.TRANSLATION:
        out.append(function if function.startswith("aten_") else
                   sig.lowering or f"aten_{OpRef(sig.overload).name}")
    if "_" in name.strip("_") and sig.owner is not Owner.TRANSLATION:
        out.append(f'"{name.strip("_").replace("_", " ")}"')
    if OpRef(sig.overload).name != name:
        out.append(f'"aten::{OpRef(sig.overload).name}"')
    return list(dict.fromkeys(out))


MAX_OPERATORS = 5  # GitHub's search takes at most five AND/OR/NOT operators
# Words that find the pull requests about the code whatever they say of the trigger: the
# one that introduced the behaviour ("Implement ...", "Add ...") and the one that fixed it.
CHANGE_WORDS = ("fix", "implement", "add")
# How reports name a dtype a node lacks (a dtype gap is searched by its dtype).
DTYPE_TERMS = {"float64": ["float64", "double"], "float16": ["float16", "half"],
               "bfloat16": ["bfloat16", "bf16"], "float32": ["float32", "float"]}
OPTIMIZER = localised.OPTIMIZER  # a `Signature.kernel` that is ORT's optimizer, not a kernel
# Exception types that say nothing of the defect: an export error of one is searched by
# its message's words.
_GENERIC = frozenset({"Exception", "RuntimeError", "ValueError", "TypeError", "AssertionError",
                      "KeyError", "IndexError", "AttributeError", "NotImplementedError",
                      "Error", "UserError", "InternalTorchDynamoError", "TorchRuntimeError"})
_WORDS = re.compile(r"[A-Za-z][A-Za-z_]+")
# How a report names the special value a defect needs: (query terms, regexes).
SPECIAL_TERMS = {
    "NaN": (("nan",), (r"\bnan\b", r"not a number")),
    "inf": (("inf", "infinity"), (r"\binf\b", r"infinity", r"\binfinite")),
    "-0": (('"negative zero"', '"signed zero"', '"-0.0"'),
           (r"negative zero", r"signed zero", r"sign of (the )?zero", r"(?<![\w.])-0(\.0)?\b")),
}
# An integer's special inputs are its extremes (no NaN, no inf).
_EXTREMES = (("maximum", "minimum", "extreme"),
             (r"\bmax(imum)?\b", r"\bmin(imum)?\b", r"\bextreme", r"iinfo", r"large"))
_NEEDS = {Symptom.NAN_DROPPED: "NaN", Symptom.SIGNED_ZERO_LOST: "-0", Symptom.INF_LOST: "inf"}
_EMPTY = (("empty", "zero-size", '"size 0"'), tuple(TRIGGER_WORDS["empty"]))
_DTYPE_SAID = re.compile(r"\b(b?float16|float(?:32|64)|bf16|fp16|fp64|half|double|u?int(?:8|16|32|"
                         r"64))\b", re.IGNORECASE)
_DTYPE_ALIAS = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp64": "float64",
                "double": "float64"}


@dataclass(frozen=True)
class Trigger:
    """What a defect needs beyond its function, as its owner's reports say it: the words a
    search ORs (`terms`), the regexes a report must match to be about it (`patterns`), the
    string arguments every call passes (`values`, each a term of its own) and the dtypes
    it shows on (a report about another dtype is another defect)."""

    what: str = ""
    terms: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()


def _specials(cause: causes.Cause) -> list[str]:
    """The special inputs a value defect needs: the one its symptom names (a NaN dropped
    needs a NaN), else those the lead case's differing element was fed."""
    sig = cause.lead
    if sig.symptom in _NEEDS:
        return [_NEEDS[sig.symptom]]
    cases = cause.members[0][1]
    example = cases[0].op.example if cases and cases[0].op is not None else None
    seen: list[str] = []
    for text in example.inputs.values() if example is not None else ():
        try:
            v = float(text)
        except ValueError:
            continue
        said = "NaN" if v != v else "inf" if v in (float("inf"), -float("inf")) else \
            "-0" if v == 0 and str(text).strip().startswith("-") else ""
        if said and said not in seen:
            seen.append(said)
    return seen or ["NaN", "inf"]


def trigger_of(cause: causes.Cause) -> Trigger:
    """A cause's trigger in its owner's words: an empty input, the special value it needs
    (NaN, inf, -0: not any special), the dtypes an error alone shows on (a dtype gap: its
    dtype), and the string arguments every call passes (`reduce='mean'` → `mean`); a
    keyword passed by name only is never a trigger a report must repeat."""
    dtypes = tuple(dict.fromkeys(d for s, _ in cause.members for d in s.dtypes))
    args = [set(a for a in s.args if "=" in a) for s, _ in cause.members]
    values = tuple(sorted(a.split("=", 1)[1].strip("'\"") for a in set.intersection(*args))) \
        if args and not cause.listing else ()
    said = cause.trigger
    if said == "empty" or all(s.input_classes == ["empty"] for s, _ in cause.members):
        return Trigger("an empty input", *_EMPTY, values, dtypes)
    if said == "specials" and causes.family(cause.lead.symptom) == "values" and dtypes \
            and all(d.startswith(("int", "uint")) for d in dtypes):
        return Trigger("extreme values", _EXTREMES[0], _EXTREMES[1], values, dtypes)
    if said == "specials" and causes.family(cause.lead.symptom) == "values":
        needs = _specials(cause)
        terms = tuple(t for n in needs for t in SPECIAL_TERMS[n][0])
        return Trigger(" or ".join(needs), terms[:3],
                       tuple(p for n in needs for p in SPECIAL_TERMS[n][1]), values, dtypes)
    named = [d for d in said.split(",") if d in TRIGGER_WORDS] if said else []
    if named:
        terms = tuple(t for d in named for t in DTYPE_TERMS.get(d, [d]))
        return Trigger(", ".join(named), terms[:3],
                       tuple(p for d in named for p in TRIGGER_WORDS[d]), values,
                       tuple(named))
    return Trigger("", (), (), values, dtypes)


def export_terms(cause: causes.Cause) -> list[str]:
    """How an exporter's report names a model's export failure: the op it stopped at, the
    error's type where it says something (`GuardOnDataDependentSymNode`), and its message's
    first words as a phrase (numbers, names and sizes left out); [] for no export error."""
    cases = cause.members[0][1]
    export = localised.exported(cases[0]) if cases else None
    if export is None:
        return []
    words = _WORDS.findall(re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`|\S*\d\S*", " ",
                                  export.message))
    phrase = " ".join(words[:6])
    op = OpRef(export.op).name if export.op.startswith(localised.OP_NAMESPACES) else ""
    kind = export.kind.rsplit(".", 1)[-1]
    return [t for t in (op, kind if kind not in _GENERIC else "",
                        f'"{phrase}"' if len(words) >= 3 else "") if t][:2]


def cause_queries(cause: causes.Cause) -> list[tuple[str, str, str]]:
    """The searches of one root cause: its lead's code in the owner's words, its function
    and its trigger (a dtype gap: its dtype; an export error: its op, type and words)."""
    about = DTYPE_TERMS.get(cause.trigger, [cause.trigger]) if cause.listing else \
        export_terms(cause)
    kernel = kernel_op(cause.lead)
    others = [s.op_name for s, _ in cause.members if s.op_name != cause.lead.op_name]
    names: list[str] = []
    if not about and kernel and cause.lead.symptom is not Symptom.MISSING_KERNEL:
        # one kernel reached by several calls (max_pool1d..3d → MaxPool): a report names
        # the ONNX op or any one of them
        names = list(dict.fromkeys([kernel, cause.lead.op_name, *others]))[:3]
    elif not about and others:
        # a decomposed call that fails through the function (BCE through log_sigmoid): a
        # report may name that call alone
        names = [*op_terms(cause.lead, cause.function)[:2], others[0]]
    return queries(cause.lead, (), about, trigger_of(cause), cause.function, names)


def _grouped(terms: Sequence[str]) -> str:
    terms = list({t.lower(): t for t in reversed(terms)}.values())[::-1]  # search ignores case
    return f"({' OR '.join(terms)})" if len(terms) > 1 else terms[0]


def queries(sig: Signature, symptoms: Sequence[Symptom] = (), about: Sequence[str] = (),
            trigger: Trigger | None = None, function: str = "", names: Sequence[str] = ()
            ) -> list[tuple[str, str, str]]:
    """(repos, kinds, q): one search per defect, issues and pull requests, open and closed,
    of every place its owner's defects are filed at once: the code in its owner's words
    (`op_terms`, or `names`; a dtype gap by its dtype, `about`) and the trigger (its words
    ORed, each string argument a term), never a required symptom word: a report says
    "ReduceMax ignores NaN" or "any is True for an empty tensor" in words no list foresees.
    Within GitHub's limit of five operators. `symptoms` is kept for callers; it no longer
    narrows."""
    del symptoms
    trig = trigger or Trigger()
    code = list(about[:3]) or list(names[:3]) or \
        op_terms(sig, function)[:3 if not trig.terms else 2]
    room = min(MAX_OPERATORS + 1 - (len(code) - 1), 5)  # the terms one OR group holds
    words = [] if about or sig.symptom is Symptom.MISSING_KERNEL \
        or not trig.terms else list(trig.terms[:room])
    # a change to the code (the pull request that introduced it or fixed it) need not say
    # the trigger: its words are alternatives to it, never a required symptom word
    words += list(CHANGE_WORDS[:max(0, room - len(words))]) if words else []
    parts = [_grouped(code), *([_grouped(words)] if words else []),
             *(f'"{v}"' if " " in v else v for v in trig.values[:2] if v.isascii()
               and re.fullmatch(r"[\w .-]+", v))]
    repos = [route.repo for route, _ in SEARCHED[sig.owner]]
    return [(",".join(repos), "issue,pr", " ".join([*(f"repo:{r}" for r in repos), *parts]))]


def kind_of(item: Mapping[str, Any]) -> MatchKind:
    pr = item.get("pull_request")
    if pr is not None:
        if item.get("state") == "open":
            return MatchKind.OPEN_PR
        return MatchKind.MERGED_PR if pr.get("merged_at") else MatchKind.CLOSED_PR
    return MatchKind.OPEN_ISSUE if item.get("state") == "open" else MatchKind.CLOSED_ISSUE


def _names(sig: Signature, also: Sequence[str] = ()) -> list[str]:
    """Spellings that name this op as code, never as a one-word English word: `torch.mean(`,
    `.mean(`, `aten::mean`, `aten.mean`, `aten_mean`, the full overload, the lowering, and
    a name of several words written plainly ("take along dim"); `also`: the cause's
    function and its other calls."""
    short = OpRef(sig.overload).name
    names = {sig.overload, f"aten::{short}", f"aten.{short}", f"aten_{short}", sig.user_op,
             f".{sig.op_name}(", f"F.{sig.op_name}(", sig.lowering, *also}
    for word in (sig.op_name, short):
        if "_" in word.strip("_"):
            names |= {word, word.strip("_").replace("_", " ")}
    if sig.symptom is Symptom.MISSING_KERNEL and sig.kernel:
        names |= {sig.kernel, sig.kernel.split('(')[0]}
    return sorted(n for n in names if n and n != "(")


def _said(pattern_or_text: str, text: str, regex: bool = False) -> bool:
    if regex:
        return re.search(pattern_or_text, text, re.IGNORECASE) is not None
    # a code name: not part of a longer identifier on either side (`Tan(7)` is not in
    # `Atan(7)`, `.mean(` is in `x.mean(`)
    name = pattern_or_text.lower()
    left = r"(?<![\w])" if name[:1].isalnum() or name[:1] == "_" else ""
    right = r"(?![\w])" if name[-1:].isalnum() or name[-1:] == "_" else ""
    return re.search(f"{left}{re.escape(name)}{right}", text.lower()) is not None


def _any(patterns: Iterable[str], text: str) -> bool:
    return any(_said(p, text, regex=True) for p in patterns)


def _also(cause: causes.Cause | None) -> list[str]:
    """The other names a report of this cause may use: its function, its other calls."""
    if cause is None or cause.listing:  # each member of a listing names its own node
        return []
    return [cause.function, *(o.user_op for o in cause.also),
            *(f".{o.op_name}(" for o in cause.also)]


def _reading(sig: Signature, text: str) -> tuple[bool, bool]:
    """(symptom described, the opposite one described instead): a NaN where eager gives a
    number is not a number where eager gives NaN."""
    info = sig.symptom.info
    symptom = _any(info.evidence, text)
    contrary = any(_any(other.info.says, text) for other in OPPOSITE.get(sig.symptom, ())) \
        and not (info.says and _any(info.says, text))
    return symptom and not contrary, contrary


def same_trigger(trigger: Trigger, title: str, text: str) -> str:
    """"" where a candidate describes the defect's trigger; else what it is about instead:
    the trigger not named (a report of NaN is not one of -0.0), or a title about dtypes
    the defect does not show on (a bfloat16 report is another defect)."""
    if trigger.patterns and not _any(trigger.patterns, text):
        return f"does not say {trigger.what}"
    said = {_DTYPE_ALIAS.get(d.lower(), d.lower()) for d in _DTYPE_SAID.findall(title)}
    if said and trigger.dtypes and not said & set(trigger.dtypes):
        return f"about {', '.join(sorted(said))}, not {', '.join(trigger.dtypes)}"
    missing = [v for v in trigger.values if not _said(v, text)]
    return f"does not say {missing[0]}" if missing else ""


def _kernel_named(op: str, text: str) -> bool:
    """An ONNX op named as one: case kept, and a one-word name (`Add`, `Where`) only as an
    op ("Add node", "Where(", "Where op"), never as an English word."""
    if not op:
        return False
    if sum(c.isupper() for c in op) > 1:
        return re.search(rf"(?<!\w){re.escape(op)}(?!\w)", text) is not None
    return re.search(rf"(?<!\w){re.escape(op)}(?:\(| (?:op|node|kernel|operator)\b)",
                     text) is not None


def assess(sig: Signature, repo: str, item: Mapping[str, Any],
           installed: Mapping[str, str], now: datetime | None = None,
           cause: causes.Cause | None = None) -> UpstreamMatch | None:
    """One candidate read against a signature: None when it is not about this op (or its
    ONNX op, the function or another call of its `cause`); else a match, confident only
    when it names the code, describes the symptom (not the opposite one) on the same
    trigger (`same_trigger`: the special value, the empty input, the dtypes, the string
    arguments) and is not a pull request that introduces the op; a merged fix only when
    its release is newer than the installed one (`fixed_in`). A merged change to the op
    that fixes nothing is listed as what likely introduced it."""
    title, body = str(item.get("title") or ""), str(item.get("body") or "")
    text = f"{title}\n{body}"
    why: list[str] = []
    trig = trigger_of(cause) if cause is not None else Trigger()
    said_as = [t.strip('"') for t in export_terms(cause)] if cause is not None else []
    named = [n for n in [*_names(sig, _also(cause)), *said_as] if _said(n, text)]
    if _kernel_named(kernel_op(sig), text):
        named.insert(0, kernel_op(sig))
    if not named:
        return None
    why.append(f"names {named[0]}")
    symptom, contrary = _reading(sig, text)
    if symptom:
        why.append(f"describes: {sig.symptom.info.title}")
    if contrary:
        said = next(o for o in OPPOSITE[sig.symptom] if _any(o.info.says, text))
        why.append(f"describes another symptom: {said.info.title}")
    other = same_trigger(trig, title, text)
    if other:
        why.append(f"another trigger: {other}")
    args = [a for a in sig.args if _said(a.split("=")[-1].strip("'\""), text)]
    if sig.args and args:
        why.append(f"arguments {', '.join(args)}")
    kind = kind_of(item)
    fixes = bool(_FIXES.search(text))
    introduces = bool(_INTRODUCES.search(title)) and not _FIXES.search(title)
    confident = symptom and not other and not introduces
    if kind in (MatchKind.OPEN_PR, MatchKind.MERGED_PR, MatchKind.CLOSED_PR):
        confident = confident and fixes
    fixed_in = None
    if kind is MatchKind.MERGED_PR and confident:
        fixed_in = _release(item, repo, installed)
        confident = fixed_in is not None  # no release newer than ours: the fix is not it
    if kind is MatchKind.CLOSED_PR:
        confident = False  # closed unmerged: an attempt, not a fix
    if introduces:
        why.append("introduces the op (not a fix)")
    if kind is MatchKind.MERGED_PR and (introduces or not fixes):
        why.append("likely introduced by: a merged change to it that fixes nothing")
    score = 3.0 * len(named) ** 0.5 + 2.0 * symptom + len(args) + STATE_SCORE[kind] + \
        _recency(item, now) - 3.0 * contrary - 2.0 * bool(other)
    return UpstreamMatch(repo=repo, number=int(item["number"]), title=title,
                         url=str(item.get("html_url") or ""), kind=kind,
                         updated_at=str(item.get("updated_at") or ""),
                         score=round(score, 3), confident=confident, fixed_in=fixed_in,
                         why=why)


def _recency(item: Mapping[str, Any], now: datetime | None) -> float:
    now = now or datetime.now(timezone.utc)
    try:
        stamp = datetime.fromisoformat(str(item.get("updated_at")).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    days = (now - stamp).days
    return 1.0 if days <= 90 else 0.5 if days <= 365 else 0.0


def _release(item: Mapping[str, Any], repo: str, installed: Mapping[str, str]) -> str | None:
    """The release a merged fix ships in (its milestone), when that is newer than the
    installed version of the package the repository builds; else None."""
    package = next((r.package for r in ROUTES.values() if r.repo == repo), "")
    milestone = item.get("milestone") or {}
    found = _VERSION.search(str(milestone.get("title") or "")) if isinstance(
        milestone, Mapping) else None
    mine = installed.get(package)
    if found is None or not mine:
        return None
    try:
        newer = Version(found.group(1)) > Version(mine.split("+")[0])
    except InvalidVersion:
        return None
    return f"{package} {found.group(1)}" if newer else None


def _order(m: UpstreamMatch) -> tuple[bool, float, str, int]:
    return (not m.confident, -m.score, m.repo, m.number)


def _repo_of(item: Mapping[str, Any], default: str) -> str:
    """The repository a search hit belongs to (one search covers several)."""
    url = str(item.get("repository_url") or "")
    return url.split("/repos/", 1)[1] if "/repos/" in url else default


def _search_cause(client: GitHubClient, cause: causes.Cause, installed: Mapping[str, str]
                  ) -> list[UpstreamMatch]:
    """Every candidate of one root cause, ranked: one search, each hit read against the
    cause's lead signature, its function and the other calls it shows in."""
    readers = list({s.symptom: s for s, _ in reversed(cause.members)}.values())[::-1]
    matches: dict[tuple[str, int], UpstreamMatch] = {}
    for repos, _kinds, q in cause_queries(cause):
        for item in client.search_issues(q).body.get("items") or []:
            repo = _repo_of(item, repos.split(",")[0])
            if not _in_scope(repo, item):
                continue
            read = [assess(r, repo, item, installed, cause=cause)
                    for r in readers]  # a report of any symptom the cause shows
            found = sorted((m for m in read if m is not None), key=_order)
            if found:
                matches.setdefault((found[0].repo, found[0].number), found[0])
    return sorted(matches.values(), key=_order)


def _claims(client: GitHubClient, cause: causes.Cause, installed: Mapping[str, str]
            ) -> dict[str, list[UpstreamMatch]]:
    """Signature key → its ranked candidates: one search per cause; a listing's members
    (the nodes a dtype lacks) are each read on their own, so a report of one node claims
    that node, and the draft lists the rest."""
    if not cause.listing:
        ranked = _search_cause(client, cause, installed)
        return {sig.key: ranked for sig, _ in cause.members}
    out: dict[str, list[UpstreamMatch]] = {}
    for member, _ in cause.members:
        one = causes.Cause(cause.key, cause.owner, cause.function, cause.culprit,
                           cause.trigger, [(member, [])], listing=True)
        out[member.key] = _search_cause(client, one, installed)  # the same query: cached
    return out


def _in_scope(repo: str, item: Mapping[str, Any]) -> bool:
    """A hit from a repository that files exporter reports under a label (pytorch's
    "module: onnx") counts only with that label or where it talks about ONNX: the search
    covers several repositories at once, so the label cannot be in the query."""
    label = next((r.label for r in ROUTES.values() if r.repo == repo), "")
    labels = {str(lab.get("name")) for lab in item.get("labels") or [] if isinstance(lab, Mapping)}
    text = f"{item.get('title') or ''} {item.get('body') or ''}".lower()
    return not label or label in labels or "onnx" in text


def _related(ranked: list[UpstreamMatch], best: UpstreamMatch | None) -> list[UpstreamMatch]:
    """Possibly related candidates: every pull request about the op (one introduced or fixed
    the behaviour), then the best-ranked issues, five in all at least."""
    rest = [m for m in ranked if m is not best]
    pulls = [m for m in rest if m.kind in (MatchKind.OPEN_PR, MatchKind.MERGED_PR,
                                           MatchKind.CLOSED_PR)]
    keep = {(m.repo, m.number): m for m in [*pulls, *rest[:max(0, 5 - len(pulls))]]}
    return sorted(keep.values(), key=_order)


def search(client: GitHubClient, found: list[tuple[Signature, list[CaseResult]]],
           installed: Mapping[str, str]) -> tuple[list[UpstreamReport], list[str]]:
    """One report per signature, searched once per root cause (`ops.causes`): every
    signature of a cause shares its candidates; and the warnings. A rate limit or a spent
    search budget stops the searching (each remaining signature says why)."""
    warnings: list[str] = []
    stopped: str | None = None
    spent: str | None = None
    by_cause: dict[str, tuple[list[UpstreamMatch], str | None]] = {}
    for cause in causes.group(found):
        error = stopped
        claims: dict[str, list[UpstreamMatch]] = {}
        if not stopped:
            try:
                claims = _claims(client, cause, installed)
            except BudgetSpent as exc:  # answers already cached still serve the next ones
                spent = error = f"not searched: {exc}"
            except RateLimited as exc:
                when = (datetime.fromtimestamp(exc.reset, timezone.utc).strftime("%H:%M UTC")
                        if exc.reset else "later")
                warnings.append(f"upstream search stopped at {cause.lead.op_name}: {exc}")
                stopped = error = f"search stopped: GitHub rate limit until {when}"
            except GitHubError as exc:
                error = f"search failed: {exc}"
                warnings.append(f"upstream search for {cause.lead.op_name} failed: {exc}")
        for sig, _ in cause.members:
            by_cause[sig.key] = (claims.get(sig.key, []), error)
    reports: list[UpstreamReport] = []
    for sig, cases in found:
        ranked, error = by_cause[sig.key]
        best = ranked[0] if ranked and ranked[0].confident and error is None else None
        reports.append(UpstreamReport(
            op=op_ref(sig, cases), cases=[c.id for c in cases], signature=sig, match=best,
            related=_related(ranked, best), searched=error is None, error=error))
    if spent:
        skipped = sum(1 for r in reports if r.error == spent)
        warnings.append(f"upstream: {skipped} defect(s) {spent}")
    return reports, warnings


# ---- creating new reports


def create_issues(client: GitHubClient, reports: list[UpstreamReport],
                  drafted: Mapping[str, tuple[str, str, str]], limit: int,
                  ledger: Path | None) -> tuple[list[UpstreamReport], list[str]]:
    """Open an issue for each drafted, unmatched signature (at most `limit`), never twice:
    the fingerprint is searched for first, and a local ledger covers search-index lag."""
    done = _read_ledger(ledger)
    out: list[UpstreamReport] = []
    warnings: list[str] = []
    opened = 0
    for report in reports:
        sig = report.signature
        if report.match is not None or sig is None or sig.key not in drafted:
            out.append(report)
            continue
        repo, title, body = drafted[sig.key]
        fp = own_fingerprint(body) or fingerprint(sig)
        try:
            url = done.get(fp) or _find_own(client, repo, fp)
            if url is None and opened >= limit:
                warnings.append(f"not opening an issue for {sig.op_name}: the limit of "
                                f"{limit} new issues per run is reached")
            elif url is None:
                url = client.post(f"/repos/{repo}/issues", {"title": title, "body": body}
                                  ).body["html_url"]
                opened += 1
        except GitHubError as exc:
            warnings.append(f"could not open an issue for {sig.op_name}: {exc}")
            url = None
        if url:
            done[fp] = url
            _write_ledger(ledger, done)
            report = _replace(report, created=url)
        out.append(report)
    return out, warnings


def _find_own(client: GitHubClient, repo: str, fp: str) -> str | None:
    items = client.search_issues(f'repo:{repo} is:issue "{fp}" in:body').body.get("items")
    for item in items or []:
        if fp in (item.get("body") or ""):
            return str(item["html_url"])
    return None


_LEDGER = TypeAdapter(dict[str, str])


def _read_ledger(path: Path | None) -> dict[str, str]:
    """Issues this tool created (fingerprint → URL), validated as a whole: a malformed file
    is one warning and an empty ledger (the issue search still finds what was created)."""
    if path is None or not path.exists():
        return {}
    try:
        return _LEDGER.validate_json(path.read_bytes(), strict=True)
    except (OSError, ValidationError) as err:
        why = (f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}"
               if isinstance(err, ValidationError) and (e := err.errors()[0]) else str(err))
        print(f"parity-gate: warning: {path}: malformed ledger of created issues ({why}); "
              "starting a new one", file=sys.stderr)
        return {}


def _write_ledger(path: Path | None, done: dict[str, str]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(done, indent=1, sort_keys=True), encoding="utf-8")


def _replace(report: UpstreamReport, **changes: Any) -> UpstreamReport:
    return UpstreamReport.from_dict({**report.to_dict(), **changes})


# ---- showing it


def markdown(reports: list[UpstreamReport], warnings: Iterable[str] = ()) -> str:
    """The "Upstream" section of the summary and the PR comment."""
    if not reports and not warnings:
        return ""
    lines = [f"### Upstream ({len(reports)} defect(s) searched in "
             f"{', '.join(sorted(SEARCHED_REPOS))})", "",
             "| defect | cases | upstream |", "|---|---|---|"]
    for r in reports:
        link = ""
        if r.match is not None:  # rebuilt from repo and number: a record's url is not used
            link = f" — {md_link(r.match.title[:80], issue_url(r.match.repo, r.match.number))}"
        elif r.created:  # linked only where it is an issue page on github.com
            link = f" — {md_link('the new issue', r.created)}"
        what = (f"{code_span(r.signature.user_op or r.op.overload, table=True)} "
                f"{md_cell(r.signature.symptom.info.title)}" if r.signature is not None
                else code_span(r.op.overload, table=True))
        lines.append(f"| {what} | {len(r.cases)} | {md_cell(r.describe())}{link} |")
    lines += [f"\n> ⚠️ {md_cell(w, 300)}" for w in warnings]
    return "\n".join([*lines, ""])


def issue_url(repo: str, number: int) -> str | None:
    """The github.com page of an issue or pull request in one of the searched repositories
    (`/issues/N` shows a pull request too); None for any other repository."""
    return github_url(repo, "issues", number) if repo in SEARCHED_REPOS else None


# ---- one pass, shared by `parity-gate upstream` and the Action


@dataclass(frozen=True)
class UpstreamOptions:
    mode: str = "draft"               # "search" | "draft" | "create"
    drafts: Path | None = None        # where drafts go (draft mode)
    repro_dir: Path | None = None     # the sweep's repro/ (not read: drafts build their own)
    max_create: int = 3
    ledger: Path | None = None        # issues this machine opened (create mode)
    verify: bool = True               # run every repro first; draft only what reproduces
    # The folder of the results being searched (the run's out folder): a model run's node
    # repro is read and run only from inside it, found there wherever the run was started.
    results_dir: Path | None = None
    check_cache: Path | None = None   # answers of earlier repro runs (keyed by script)
