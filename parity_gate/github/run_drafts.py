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

import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.engine import sandbox
from parity_gate.github import drafts
from parity_gate.github.upstream import UpstreamOptions, _replace, fingerprint, issue_url
from parity_gate.model.files import copy_file, make_folder, own_folder_problem
from parity_gate.model.findings import Example
from parity_gate.model.localisation import Culprit
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import code_block, code_span, md_link, md_text, one_line
from parity_gate.model.upstream import OpRef, Owner, Signature, Symptom, UpstreamReport
from parity_gate.ops import elements, localised
from parity_gate.ops.signatures import value_symptom

FILES = ("model.onnx", "inputs.npz", "args.npz", "expected.npz", "reference.npz",
         "onnxruntime.npz", "case.json", "repro.py")
CLASSES = {"normal": "ordinary values", "specials": "NaN or ±inf among them",
           "empty": "an empty tensor among them"}
# An export failure's repro re-exports the user's model: searched and given a status, but a
# report needs the failing call cut out of it, which only its owner can do.
EXPORT_NOT_DRAFTED = ("an export failure's repro re-exports your model: reduce it to the "
                      "failing call before filing")
HOW_FOUND = ("Found by exporting a model with `torch.onnx.export(..., dynamo=True)`, "
             "comparing ONNX Runtime with eager, and localising the difference to the first "
             "node whose inputs agree with eager and whose output does not; its ONNX nodes "
             "alone, fed the values they saw, show it (the repro above).")


def prepare(run: RunResult, reports: list[UpstreamReport],
            found: list[tuple[Signature, list[CaseResult]]], options: UpstreamOptions,
            ) -> tuple[list[UpstreamReport], drafts.Drafted]:
    """Drafts for the searched, unmatched localised signatures whose node repro still
    reproduces (exit 1; every one with `verify` off); the others say why not. Each
    report's repros are run once, the reports side by side (one per core: the runs are
    processes, the threads only wait on them)."""
    cases = {sig.key: cs for sig, cs in found}
    with ThreadPoolExecutor(max_workers=max(1, min(len(reports), os.cpu_count() or 1))) as pool:
        made = list(pool.map(lambda r: _draft(run, r, cases, options), reports))
    drafted: drafts.Drafted = {}
    for r, entry in made:
        if entry is not None and r.signature is not None:
            drafted[r.signature.key] = entry
    return [r for r, _ in made], drafted


def _draft(run: RunResult, r: UpstreamReport, cases: Mapping[str, list[CaseResult]],
           options: UpstreamOptions) -> tuple[UpstreamReport, tuple[str, str, str] | None]:
    """One report and its draft (repository, title, body), or why it has none."""
    sig = r.signature
    if r.match is not None or not r.searched or sig is None or sig.key not in cases:
        return r, None
    lead = cases[sig.key][0]
    if lead.localisation is None or lead.localisation.culprit is None:
        return _replace(r, not_drafted=EXPORT_NOT_DRAFTED), None
    # the standalone scripts are verified themselves: the node repro is run again only
    # where none holds (its folder is then the repro, attached)
    folder, output, why = _checked(lead, False, options.results_dir)
    if folder is None or lead.localisation.culprit is None:
        return _replace(r, not_drafted=why), None
    culprit = lead.localisation.culprit
    level = localised.optimizer_level(lead) if sig.owner is Owner.KERNEL else ""
    script, alone, example = _script(folder, sig.owner, level, options.verify)
    if script is None and options.verify:
        folder, output, why = _checked(lead, True, options.results_dir)
        if folder is None:
            return _replace(r, not_drafted=why), None
    if example is None:
        example = stable(printed_alone(alone) if script else printed(output))
    title = title_of(sig, culprit, example, level)
    if script is not None and options.verify and "call" not in (example.inputs if example
                                                                 else {}):
        opened = module_script(folder, opened=True) if sig.owner is not Owner.KERNEL else None
        if opened is not None and _passes(opened):  # measured: the masked row is the trigger
            title = f"{title} for a fully masked row"[:drafts.TITLE_LIMIT]
    return r, (sig.owner.route.repo, title,
               body(sig, run, culprit, folder, output, r, script, alone))


def _script(folder: Path, owner: Owner, level: str, verify: bool
            ) -> tuple[str | None, str, Example | None]:
    """The draft's standalone script, what running it printed, and the example its title
    quotes. A translation's or capture's defect: the eager call as a module, exported; a
    kernel's (or an optimizer's), or a call with no literal form: the ONNX nodes inline.
    Candidates simplest first, each run once, the first that holds kept: the one output
    element that differs most (`ops.elements`) with its values of random data rounded,
    where it fails with the same symptom (NaN, inf, the sign of zero); that element as it
    was, where it prints the very values the culprit showed there (the same defect, not
    another); then the values the culprit saw. Unverified (`verify` off): never cut."""
    worst = localised.node_worst(str(folder)) if verify else None
    module = owner is not Owner.KERNEL
    shown = ""
    candidates: list[tuple[str | None, str]] = []  # (script, what its output must show)
    if worst is not None:
        at = worst[0]
        shown = "expected: {} | onnxruntime: {}".format(*(str(a[at]) for a in worst[1:]))
        if module:
            candidates += [(module_script(folder, at, simple=True), "symptom"),
                           (module_script(folder, at), "value")]
        candidates.append((standalone(folder, level, at), "value"))
    if module:
        candidates.append((module_script(folder), "failure"))
    candidates.append((standalone(folder, level), "failure"))
    for script, must in candidates:
        if script is None:
            continue
        if not verify:
            return script, "", None
        shows, alone = _verified(script)
        same = shown != "" and shown in alone
        if not shows or (must == "value" and not same) or \
                (must == "symptom" and _symptom(alone) is not _symptom(shown)):
            continue
        if worst is None or not (same or must == "symptom"):
            return script, alone, None
        call = call_on_values(folder, worst[0], simple=must == "symptom")
        found = _ALONE.search(alone)  # what this script printed, else the culprit's values
        eager, got = found.groups() if found else (str(worst[1][at]), str(worst[2][at]))
        return script, alone, Example("o0", [], eager, got, inputs={"call": call}) \
            if call is not None else None
    return None, "", None


def _passes(script: str) -> bool:
    """Whether a standalone script finishes (exit 0), its assertion holding."""
    return _run(script)[0] == 0


def _symptom(printed: str) -> Symptom | None:
    """The symptom a standalone script printed ("expected: 0.0 | onnxruntime: nan")."""
    found = _ALONE.search(printed)
    if found is None:
        return None
    try:
        return value_symptom(float(found.group(1)), float(found.group(2)))
    except ValueError:
        return None


def call_on_values(folder: Path, at: tuple[int, ...], simple: bool = False) -> str | None:
    """The call a one-element repro's title names (`atan2(0.0, -2.0)`), on the values feeding
    output element `at` (rounded with `simple`), where every one is plain
    (`ops.elements.plain`: no value of random data, so the results are fixed by the call);
    None otherwise."""
    loaded = _call_args(folder)
    if loaded is None:
        return None
    call, args = loaded
    one = args if all(a.size == 1 for a in args.values()) else \
        elements.one_element(args, _expected_shape(folder), at)
    if one is not None and simple:
        one = elements.rounded(one) or one
    if one is None:
        return None
    values = {k: str(v.ravel()[0]) for k, v in one.items()}
    text = elements.call_text(call, values)
    return text if text is not None and all(elements.plain(v) for v in values.values()) \
        else None


def title_of(sig: Signature, culprit: Culprit, example: Example | None, level: str = "") -> str:
    """The draft's title: the sweep's wording (`drafts.title`) with a tensor option named
    by its kind ("with a float32 attn_mask"); a difference that needs an ORT optimization
    level names ORT's optimizer and the level, not a kernel."""
    if level and sig.owner is Owner.KERNEL:
        op = sig.kernel.rsplit(": ", 1)[-1] if ": " in sig.kernel else sig.op_name
        dtypes = f" on {', '.join(sig.dtypes)}" if sig.dtypes else ""
        return one_line(f"CPUExecutionProvider: graph optimizations at {level} make {op} "
                        f"{sig.symptom.info.title.replace('returns', 'return')}{dtypes} "
                        "(correct with ORT_DISABLE_ALL)")[:drafts.TITLE_LIMIT]
    call = example.inputs.get("call", "") if example is not None \
        and sig.owner is not Owner.KERNEL else ""
    if "(" in call:  # the op as users call it (`erfcx`, not ATen's `special_erfcx`)
        call = sig.op_name + call[call.index("("):]
    return drafts.title(sig, example=example, kinds=culprit.options, call=call)


_ALONE = re.compile(r"expected: (\S+) \| onnxruntime: (\S+)")


def printed_alone(output: str) -> Example | None:
    """The element a standalone script printed: "expected: 0.0 | onnxruntime: nan"."""
    found = _ALONE.search(output)
    return Example("o0", [], found.group(1), found.group(2)) if found else None


def stable(example: Example | None) -> Example | None:
    """An example a title may quote: both values special (NaN, ±inf), zero, a whole number
    or a boolean (`ops.elements.whole`); a value of the model's own data (-0.3896) is left
    to the body."""
    if example is None or not (elements.whole(example.eager) and elements.whole(example.onnx)):
        return None
    return example


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


# What a standalone script may hold and still read as one: the culprit's nodes written out,
# every array's values inline.
MAX_NODES = 12
MAX_ELEMENTS = 256
_NP = {"float32": "np.float32", "float64": "np.float64", "float16": "np.float16",
       "int64": "np.int64", "int32": "np.int32", "int16": "np.int16", "int8": "np.int8",
       "uint8": "np.uint8", "bool": "np.bool_"}
_LEVEL_ENUM = {"ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"}


def _num(x: object) -> str:
    """One value as Python source: NaN and ±inf by numpy's names, -0.0 kept, a float in
    the fewest digits that read back as its own dtype (-0.76779914, not 17 digits)."""
    if isinstance(x, np.bool_ | bool):
        return repr(bool(x))
    if isinstance(x, np.integer):
        return repr(int(x))
    if isinstance(x, np.floating | float):
        v = float(x)
        return "np.nan" if v != v else "np.inf" if v == float("inf") else \
            "-np.inf" if v == -float("inf") else repr(float(str(x)))
    return repr(x)


def _array(a: Any) -> str:
    values = ", ".join(_num(v) for v in a.ravel())
    shape = f".reshape({tuple(a.shape)!r})" if a.ndim != 1 else ""
    return f"np.array([{values}], dtype={_NP[str(a.dtype)]}){shape}"


def _attribute(attr: Any) -> str | None:
    """An ONNX attribute as `helper.make_node` keyword source; None for one a script
    cannot spell briefly (a subgraph, a sparse tensor)."""
    import onnx
    from onnx import numpy_helper

    if attr.type == onnx.AttributeProto.TENSOR:
        array = numpy_helper.to_array(attr.t)
        if str(array.dtype) not in _NP or array.size > 16:
            return None
        return f"numpy_helper.from_array({_array(array)})"
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                     onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSORS):
        return None
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return repr(value.decode())
    if isinstance(value, list):
        return "[" + ", ".join(repr(v.decode()) if isinstance(v, bytes) else _num(v)
                               for v in value) + "]"
    return _num(value)


def standalone(folder: Path, level: str = "", at: tuple[int, ...] | None = None) -> str | None:
    """A script that stands alone: the culprit's ONNX nodes built inline with
    `onnx.helper` (tensors renamed x0.., t0.., y: no name from the model), the values they
    were fed and eager's output written out (deterministic: what showed the defect), run in
    ONNX Runtime's CPUExecutionProvider at `level` ("": its default; an optimizer's defect:
    the level it first shows at, beside the run with optimizations off), and an assertion
    that fails where the defect shows. Needs numpy, onnx and onnxruntime only. With `at`:
    fed only the elements of output element `at` (`ops.elements`; every weight a single
    value). None where the cut cannot be written briefly (functions, subgraphs, more than
    MAX_NODES nodes or MAX_ELEMENTS values, a dtype numpy lacks) or cut to `at`."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        return None
    try:
        model = onnx.load(str(folder / "model.onnx"))
        with np.load(folder / "inputs.npz") as data:
            feeds = {k: data[k] for k in data.files}
        with np.load(folder / "expected.npz") as data:
            expected = data[data.files[0]]
    except (OSError, ValueError, onnx.onnx_cpp2py_export.checker.ValidationError):
        return None
    graph = model.graph
    nodes = [n for n in graph.node]
    if at is not None:
        shrunk = elements.one_element(feeds, tuple(expected.shape), at) \
            if all(numpy_helper.to_array(t).size <= 1 for t in graph.initializer) else None
        if shrunk is None:
            return None
        feeds, expected = shrunk, np.asarray(expected[at]).reshape((1,) * expected.ndim)
    arrays = [*feeds.values(), expected, *(numpy_helper.to_array(t) for t in graph.initializer)]
    if model.functions or len(nodes) > MAX_NODES or not graph.output \
            or sum(a.size for a in arrays) > MAX_ELEMENTS \
            or any(str(a.dtype) not in _NP for a in arrays):
        return None
    inputs = [i.name for i in graph.input if i.name in feeds]
    names = {n: f"x{i}" for i, n in enumerate(inputs)}
    names |= {t.name: f"c{i}" for i, t in enumerate(graph.initializer)}
    out = graph.output[0].name
    made: list[str] = []
    for node in nodes:
        for o in node.output:
            if o and o not in names:
                names[o] = "y" if o == out else f"t{len(names)}"
        attrs = []
        for a in node.attribute:
            text = _attribute(a)
            if text is None:
                return None
            attrs.append(f", {a.name}={text}")
        domain = f", domain={node.domain!r}" if node.domain else ""
        made.append(f"    helper.make_node({node.op_type!r}, "
                    f"{[names.get(i, '') for i in node.input]!r}, "
                    f"{[names[o] if o else '' for o in node.output]!r}{''.join(attrs)}"
                    f"{domain}),")
    if out not in names or any(i and i not in names for n in nodes for i in n.input):
        return None
    opsets = ", ".join(f"helper.make_opsetid({o.domain!r}, {o.version})"
                       for o in model.opset_import)
    elem = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    declared = ", ".join(f"helper.make_tensor_value_info({names[n]!r}, {elem.get(n, 1)}, "
                         f"{list(feeds[n].shape)!r})" for n in inputs)
    consts = "".join(f"\n    numpy_helper.from_array({_array(numpy_helper.to_array(t))}, "
                     f"{names[t.name]!r})," for t in graph.initializer)
    fed = ", ".join(f"{names[n]!r}: {_array(feeds[n])}" for n in inputs)
    optimized = f"ort.GraphOptimizationLevel.{level}" if level in _LEVEL_ENUM else ""
    run = ("def run(level):\n    options = ort.SessionOptions()\n"
           "    options.graph_optimization_level = level\n"
           "    return ort.InferenceSession(model.SerializeToString(), options, providers=["
           "'CPUExecutionProvider']).run(None, feeds)[0]\n\n\n"
           "off = run(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)\n"
           f"got = run({optimized})\n" if optimized else
           "got = ort.InferenceSession(model.SerializeToString(), providers=["
           "'CPUExecutionProvider']).run(None, feeds)[0]\n")
    shown = ("print('optimizations off:', off.ravel()[i], '| on:', got.ravel()[i])\n"
             if optimized else "")
    return (
        "import numpy as np\nimport onnxruntime as ort\nfrom onnx import helper, numpy_helper"
        "\n\nnodes = [\n" + "\n".join(made) + "\n]\n"
        f"graph = helper.make_graph(nodes, 'repro', [{declared}], "
        f"[helper.make_tensor_value_info('y', {graph.output[0].type.tensor_type.elem_type}, "
        f"None)], [{consts}])\n"
        f"model = helper.make_model(graph, opset_imports=[{opsets}])\n"
        f"feeds = {{{fed}}}\n"
        f"expected = {_array(expected)}  # what eager (PyTorch) returns\n"
        f"{run}"
        "bad = ~np.isclose(got, expected, rtol=1e-3, atol=1e-5, equal_nan=True)\n"
        "i = int(np.argmax(bad.ravel())) if bad.any() else 0\n"
        "print('expected:', expected.ravel()[i], '| onnxruntime:', got.ravel()[i])\n"
        f"{shown}"
        "assert not bad.any(), 'ONNX Runtime differs from eager'\n")


_ARG = re.compile(r"A\['([^']+)'\]")
_CHECK = (
    "bad = ~np.isclose(got, expected, rtol=1e-3, atol=1e-5, equal_nan=True)\n"
    "i = int(np.argmax(bad.ravel())) if bad.any() else 0\n"
    "print('expected:', expected.ravel()[i], '| onnxruntime:', got.ravel()[i])\n")


def module_script(folder: Path, at: tuple[int, ...] | None = None, simple: bool = False,
                  opened: bool = False) -> str | None:
    """A script that stands alone for a translation's or capture's defect: a one-line
    module making the culprit's eager call (`torch.ops.aten...`, arguments renamed x0..:
    no name from the model; none where the call is all literals), its arguments written
    out (with `at`: only the elements feeding that output element, `ops.elements`),
    exported with `torch.onnx.export(..., dynamo=True)`, run in ONNX Runtime and compared
    with eager; the assertion fails where the defect shows. `simple`: each value of random
    data rounded (`ops.elements.rounded`; eager's answer is computed in the script, so it
    stays true). `opened`: every fully masked row let through (`ops.elements.unmasked`).
    None without a literal call, arguments too large to write out (MAX_ELEMENTS) or of a
    dtype numpy lacks, an `at` the arguments cannot be cut to, or nothing to round or open."""
    loaded = _call_args(folder)
    if loaded is None:
        return None
    call, args = loaded
    used = list(dict.fromkeys(_ARG.findall(call)))
    if at is not None:
        shrunk = elements.one_element({u: args[u] for u in used}, _expected_shape(folder), at)
        if shrunk is None:
            return None
        args = shrunk
    if opened:
        through = elements.unmasked({u: args[u] for u in used})
        if through is None:
            return None
        args = through
    if simple:
        simpler = elements.rounded({u: args[u] for u in used})
        if simpler is None:
            return None
        args = simpler
    if sum(args[u].size for u in used) > MAX_ELEMENTS:
        return None
    names = {u: f"x{i}" for i, u in enumerate(used)}
    body = _ARG.sub(lambda m: names[m.group(1)], call)
    params = "".join(f", {n}" for n in names.values())
    values = "".join(f"\n    torch.from_numpy({_array(args[u])})," for u in used)
    values += "\n" if values else ""
    return (
        "import numpy as np\nimport onnxruntime as ort\nimport torch\n\n\n"
        "class M(torch.nn.Module):\n"
        f"    def forward(self{params}):\n        return {body}\n\n\n"
        f"A = ({values})\n"
        "expected = M()(*A).numpy()\n"
        "program = torch.onnx.export(M().eval(), A, dynamo=True)\n"
        "session = ort.InferenceSession(program.model_proto.SerializeToString(), "
        "providers=['CPUExecutionProvider'])\n"
        f"feeds = dict(zip({list(names.values())!r}, (a.numpy() for a in A)))\n"
        "got = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})[0]\n"
        + _CHECK + "assert not bad.any(), 'ONNX Runtime differs from eager'\n")


def _call_args(folder: Path) -> tuple[str, dict[str, np.ndarray]] | None:
    """The culprit's literal eager call and the arrays it reads (all of a dtype numpy
    spells), from the node repro's folder; None without one."""
    try:
        meta = json.loads((folder / "case.json").read_text(encoding="utf-8"))
        args: dict[str, np.ndarray] = {}
        if (folder / "args.npz").is_file():
            with np.load(folder / "args.npz") as data:
                args = {k: data[k] for k in data.files}
    except (OSError, ValueError):
        return None
    call = str(meta.get("call") or "")
    used = set(_ARG.findall(call))
    if not call.startswith("torch.ops.") or any(u not in args for u in used) \
            or any(str(args[u].dtype) not in _NP for u in used):
        return None
    return call, {u: args[u] for u in used}


def _expected_shape(folder: Path) -> tuple[int, ...]:
    with np.load(folder / "expected.npz") as data:
        return tuple(data[data.files[0]].shape)


def _verified(script: str) -> tuple[bool, str]:
    """Run a standalone script as a reader would, in an empty folder, in the sandbox with
    no credential: (whether it failed with the assertion, what it printed)."""
    code, printed = _run(script)
    # what a reader needs of it: the values it printed and the assertion, not the
    # exporter's progress lines and warnings
    shown = "\n".join(line for line in printed.splitlines()
                      if line.startswith(("expected:", "optimizations off:", "AssertionError")))
    return code == 1 and "AssertionError" in printed, shown


def _run(script: str) -> tuple[int | None, str]:
    """Run a standalone script as a reader would, in an empty folder, in the sandbox with
    no credential: (its exit code, None past 120 s; what it printed)."""
    with tempfile.TemporaryDirectory(prefix="parity-gate-standalone-") as where:
        (Path(where) / "repro.py").write_text(script, encoding="utf-8")
        done = sandbox.run([sys.executable, "repro.py"], Path(where), 120, None, stdout=True)
    return done.returncode, done.stderr.strip()


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


# Said by a draft whose repro needs the node repro's files beside it (`attach` copies them).
ATTACHED = "exits 1 when it reproduces"


def body(sig: Signature, run: RunResult, culprit: Culprit, folder: Path, output: str,
         report: UpstreamReport, script: str | None = None, alone: str = "") -> str:
    """The report: what, the repro (a standalone script where one could be written and
    verified; else the node repro's, its folder attached), expected vs actual with the
    repro's output, the nodes, whose code, versions, related."""
    if script is not None and "import torch" in script:
        repro = (f"The call as a one-line module, exported and run in ONNX Runtime beside "
                 "eager; it needs torch, numpy and onnxruntime only and fails its assertion "
                 f"where the defect shows.\n\n{code_block(script, 'python')}")
        output = alone
    elif script is not None:
        repro = (f"The ONNX nodes {code_span(culprit.aten)} became, built inline and fed the "
                 "values they saw; it needs numpy, onnx and onnxruntime only and fails its "
                 f"assertion where the defect shows.\n\n{code_block(script, 'python')}")
        output = alone
    else:
        files = ", ".join(code_span(f) for f in FILES
                          if (folder / f).is_file() and f != "repro.py")
        repro = (f"The ONNX nodes {code_span(culprit.aten)} became, cut out of the exported "
                 f"model and fed the values they saw, beside the one eager call (attached: "
                 f"{files}). {code_span('python repro.py')} {ATTACHED}.\n\n"
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
        if r.draft is None or loc is None or not loc.node_repro \
                or ATTACHED not in Path(r.draft).read_text(encoding="utf-8"):
            continue  # a standalone repro needs no file beside it
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
