"""Pull requests merged into the culprit's repository between the two releases of the
boundary (whichever is newer: a downgrade's, or a located fix's, bad release is the older
one) that mention what broke, in the owner's words: ONNX op and kernel names for ONNX
Runtime, the torchlib function for onnxscript, schema names for onnx, ATen names for torch.
"Likely introduced by" when the bad release is the newer one, "likely fixed by" otherwise.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from parity_gate.github.client import GitHubClient, GitHubError
from parity_gate.model.bisect import UpstreamChange
from parity_gate.model.results import CaseResult
from parity_gate.model.upstream import ROUTES, OpRef
from parity_gate.ops.signatures import signature_of

# The package whose release moved → the repository its code is merged in.
REPOS = {route.package: route.repo for route in ROUTES.values()}
REPOS["onnx"] = "onnx/onnx"
REPOS["onnxruntime-gpu"] = "microsoft/onnxruntime"


# Where ONNX Runtime's messages name the kernel: `Op (Reshape)`, `running Pad node`,
# `op_type:Mul`, `onnxruntime::Mod::Mod(...)`.
_KERNEL_NAMES = (re.compile(r"Op \((\w+)\)"), re.compile(r"running (\w+) node"),
                 re.compile(r"op_type:(\w+)"), re.compile(r"onnxruntime::(\w+)::\1\b"))


# Where onnx and ONNX Runtime name a schema they lack: `No Op registered for RMSNormalization`,
# `No schema registered for 'X'`, `Unrecognized op type X`.
_SCHEMA_NAMES = (re.compile(r"No (?:Op|op|schema|Schema) registered for '?(\w+)"),
                 re.compile(r"[Uu]nrecognized (?:op|node) type:? '?(\w+)"),
                 re.compile(r"schema (?:for|of) '?(\w+)'? "))


def looks_for(last_good: str, first_bad: str) -> str:
    """"regression" when the first bad release is the newer one, "fix" when it is the older
    (a downgrade, or a fix being located): what the pull requests found did."""
    try:
        return "regression" if Version(first_bad) > Version(last_good) else "fix"
    except InvalidVersion:
        return "regression"


def _onnx_names(case: CaseResult, patterns: tuple[re.Pattern[str], ...]) -> list[str]:
    """ONNX op types the case names: in its message, its op-sweep kernel, its culprit's nodes."""
    out = [m.group(1) for pattern in patterns for m in pattern.finditer(case.reason)]
    if case.op is not None:
        sig = signature_of(case)
        if sig.kernel:
            out.append(sig.kernel.split("(")[0])
    loc = case.localisation
    if loc is not None and loc.culprit is not None:
        out += loc.culprit.onnx_nodes[:3]
    return out


def _aten(case: CaseResult) -> str:
    """The ATen op the case names (`layer_norm`), "" when none."""
    if case.op is not None:
        return signature_of(case).op_name
    loc = case.localisation
    if loc is not None and loc.culprit is not None and loc.culprit.aten:
        return OpRef(loc.culprit.aten).name
    if case.cause is not None and case.cause.op:
        return OpRef(case.cause.op).name
    return ""


def terms(case: CaseResult, package: str = "") -> list[str]:
    """The names a pull request that changed the culprit would mention, in its owner's
    vocabulary, most specific first ([] when nothing names one): ONNX Runtime's kernels and
    ONNX ops (never the ATen name while one is known), onnx's schema names, onnxscript's
    torchlib function (`aten_layer_norm`) and its op, torch's ATen op."""
    aten = _aten(case)
    if package.startswith("onnxruntime"):
        found = _onnx_names(case, (*_KERNEL_NAMES, *_SCHEMA_NAMES))
    elif package == "onnx":
        found = _onnx_names(case, (*_SCHEMA_NAMES, *_KERNEL_NAMES))
    elif package == "onnxscript":
        lowering = signature_of(case).lowering if case.op is not None else ""
        found = [lowering or (f"aten_{aten}" if aten else ""), aten]
    else:
        found = [aten]
    if not any(found) and aten:
        found = [aten]
    return list(dict.fromkeys(t for t in found if t))


def touched(case: CaseResult, package: str = "") -> str:
    """The most specific name `terms` gives ("" when none)."""
    return next(iter(terms(case, package)), "")


def merged_between(client: GitHubClient, package: str, since: str, until: str,
                   term: str | list[str], limit: int = 10
                   ) -> tuple[list[UpstreamChange], str]:
    """(pull requests, note): merged between the two releases' uploads (ISO dates, in either
    order: the window is the same) mentioning any of `term`; the note says why the list is
    empty or absent."""
    words = [term] if isinstance(term, str) else list(term)
    words = [w for w in words if w]
    repo = REPOS.get(package)
    if repo is None:
        return [], f"no repository known for {package}"
    if not words:
        return [], "no function or kernel named by the failing case to search for"
    if not since or not until:
        return [], "the index gave no release dates"
    lo, hi = sorted((since[:10], until[:10]))
    said = words[0] if len(words) == 1 else "(" + " OR ".join(words[:5]) + ")"
    query = f"repo:{repo} is:pr is:merged merged:{lo}..{hi} {said}"
    try:
        body = client.search_issues(query, per_page=limit).body or {}
    except GitHubError as exc:
        return [], f"upstream search failed: {exc}"
    items = body.get("items", []) if isinstance(body, dict) else []
    out = []
    for i in items[:limit]:
        if not isinstance(i, dict) or "number" not in i:
            continue
        text = f"{i.get('title', '')}\n{i.get('body') or ''}".lower()
        out.append(UpstreamChange(
            repo=repo, number=int(i["number"]), title=str(i.get("title", "")),
            url=str(i.get("html_url", "")),
            merged_at=str((i.get("pull_request") or {}).get("merged_at") or ""),
            touches=next((w for w in words if w.lower() in text), words[0])))
    return out, "" if out else (f"no pull request merged between {lo} and {hi} mentions "
                                f"{' or '.join(words[:5])}")
