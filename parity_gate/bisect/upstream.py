""""Likely introduced by": pull requests merged into the culprit's repository between the
last good and the first bad release that mention the culprit's function or kernel."""

from __future__ import annotations

import re

from parity_gate.github.client import GitHubClient, GitHubError
from parity_gate.model.bisect import UpstreamChange
from parity_gate.model.results import CaseResult
from parity_gate.model.upstream import ROUTES, OpRef, Owner
from parity_gate.ops.signatures import signature_of

# The package whose release moved → the repository its code is merged in.
REPOS = {route.package: route.repo for route in ROUTES.values()}
REPOS["onnx"] = "onnx/onnx"
REPOS["onnxruntime-gpu"] = "microsoft/onnxruntime"


# Where ONNX Runtime's messages name the kernel: `Op (Reshape)`, `running Pad node`,
# `op_type:Mul`, `onnxruntime::Mod::Mod(...)`.
_KERNEL_NAMES = (re.compile(r"Op \((\w+)\)"), re.compile(r"running (\w+) node"),
                 re.compile(r"op_type:(\w+)"), re.compile(r"onnxruntime::(\w+)::\1\b"))


def touched(case: CaseResult, package: str = "") -> str:
    """The name a pull request that changed the culprit would mention: for an ONNX Runtime
    culprit the kernel its message names, else the kernel's ONNX op, the torchlib
    function's op (`aten_atan2` is searched as `atan2`), or the op the localisation or the
    export failure named ("" when nothing names one)."""
    if package.startswith("onnxruntime"):
        for pattern in _KERNEL_NAMES:
            found = pattern.search(case.reason)
            if found:
                return found.group(1)
    if case.op is not None:
        sig = signature_of(case)
        if sig.owner is Owner.KERNEL and sig.kernel:
            return sig.kernel.split("(")[0]
        return sig.op_name
    loc = case.localisation
    if loc is not None and loc.culprit is not None and loc.culprit.aten:
        return OpRef(loc.culprit.aten).name
    if case.cause is not None and case.cause.op:
        return OpRef(case.cause.op).name
    return ""


def merged_between(client: GitHubClient, package: str, since: str, until: str,
                   term: str, limit: int = 10) -> tuple[list[UpstreamChange], str]:
    """(pull requests, note): merged in (since, until] (ISO dates of the two releases'
    uploads) mentioning `term`; the note says why the list is empty or absent."""
    repo = REPOS.get(package)
    if repo is None:
        return [], f"no repository known for {package}"
    if not term:
        return [], "no function or kernel named by the failing case to search for"
    if not since or not until:
        return [], "the index gave no release dates"
    query = (f"repo:{repo} is:pr is:merged merged:{since[:10]}..{until[:10]} {term}")
    try:
        body = client.search_issues(query, per_page=limit).body or {}
    except GitHubError as exc:
        return [], f"upstream search failed: {exc}"
    items = body.get("items", []) if isinstance(body, dict) else []
    out = [UpstreamChange(repo=repo, number=int(i["number"]), title=str(i.get("title", "")),
                          url=str(i.get("html_url", "")),
                          merged_at=str((i.get("pull_request") or {}).get("merged_at") or ""),
                          touches=term)
           for i in items[:limit] if isinstance(i, dict) and "number" in i]
    return out, "" if out else f"no merged pull request between the releases mentions {term}"
