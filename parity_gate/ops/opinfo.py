"""Op variants from PyTorch's own OpInfo database (`common_methods_invocations.op_db`).

Every OpInfo sample becomes one `OpVariant`: the call is rendered as text
(`torch.nn.functional.conv2d(t0, t1, stride=2)`), every tensor of the sample
is a graph input (a `sample` arg holding the sample's values), and the rest
of the sweep (batching, bisection, re-checks, baseline, findings) treats it
like a catalogue record. Float tensors take the case dtype and the input
classes; integer and bool tensors (indices, masks, lengths) keep their
values. The first `CROSS` samples of each OpInfo are crossed with the
`specials` and `empty` classes (and `range` for unary and special
functions); every sample runs `normal` on each dtype eager accepts.

Building needs torch and the `expecttest` package (the OpInfo database
imports it), so it runs once per torch version in a subprocess and is cached
as JSON under `$XDG_CACHE_HOME/parity-gate/` (the parent never imports torch;
workers read the same file). Generation is seeded per OpInfo (torch, `random`,
numpy and the hash seed), and the keep checks allow rounding noise, which
follows memory alignment, so every machine of one torch version plans the same
case ids. A sample that cannot be rendered faithfully is dropped, counted by
reason (`dropped`):
the rendered call is run against the OpInfo's own callable at generation
time and must give the same answer.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from parity_gate.errors import UserError
from parity_gate.manifest.limits import ITEMSIZE
from parity_gate.ops.records import EMPTY, NORMAL, SPECIALS, Arg, OpVariant

FORMAT = 3  # 2: swapped and attribute spellings, complex outputs as real pairs; 3: reproducible
# builds (rounding-tolerant keep checks, fixed hash seed): an older cache may hold other ids
PREFIX = "oi."
CROSS = 2             # samples per OpInfo that also run specials, empty (and range)
MAX_ELEMENTS = 4096   # a bigger sample would dominate its batch's time
# Sample generators iterate over sets of strings (meshgrid's {'xy', 'ij'}): their order, so
# which sample gets which id, follows the hash seed, fixed for the build.
HASH_SEED = "0"
# Values that depend on a random draw, or on nothing but a shape: no parity to check.
RANDOM = frozenset({
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal", "uniform",
    "multinomial", "rand_like", "randint", "randint_like", "randn", "randn_like",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "empty_permuted", "native_dropout_backward", "resize_", "resize_as_", "item",
})
# Index outputs among ties of these ops are legitimately implementation-defined.
TIES = frozenset({"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian",
                  "mode", "max", "min", "cummax", "cummin", "unique", "unique_consecutive"})
# The dtype samples are made in: float32 where the OpInfo supports it, else an integer one.
REFERENCE = ("float32", "int64", "int32", "bool", "uint8", "int8")
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int8", "int32", "int64",
                "uint8", "bool", "int16")
_ID_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def torch_version() -> str:
    from parity_gate.ops.accepted import torch_version as version

    return version()


def cache_path(version: str, ops: tuple[str, ...] | None = None) -> Path:
    from parity_gate.ops.accepted import cache_root

    part = "" if ops is None else "-" + hashlib.sha256(
        ",".join(ops).encode()).hexdigest()[:12]
    return cache_root() / f"opinfo-variants-torch-{version}{part}.json.gz"


def variants(ops: Iterable[str] | None = None) -> list[OpVariant]:
    """The OpInfo variants of the installed torch (or of the OpInfos named `ops`),
    built in a subprocess on first use and read from the cache afterwards. A cache of
    another torch or format is rebuilt silently; one of this torch and format whose
    contents are wrong (edited, truncated by hand, written by a bug) with one warning."""
    subset = None if ops is None else tuple(sorted(ops))
    version = torch_version()
    path = cache_path(version, subset)
    data, why = read(path, version)
    if data is None:
        if why:
            print(f"parity-gate ops: warning: {path}: {why}; rebuilding it", file=sys.stderr)
        generate(path, subset)
        data, why = read(path, version)
        if data is None:
            raise UserError(f"ops: the OpInfo variants written to {path} cannot be read "
                            f"({why or 'not written'}; expected a gzip JSON file of "
                            f"format {FORMAT}; remove it and run again)")
    return [from_json(v) for v in data.variants]


def __getattr__(name: str) -> Any:
    """`parity_gate.ops.opinfo:VARIANTS`, a registry source, built lazily: importing the
    module costs nothing until the variants are asked for."""
    if name == "VARIANTS":
        found = variants()
        globals()["VARIANTS"] = found
        return found
    raise AttributeError(name)


# --------------------------------------------------------------------------
# the cache file, validated as a whole (pure)

_DTYPE = Literal["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32",
                 "int64", "uint8", "bool"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CachedArg(_Strict):
    name: str = Field(pattern=r"^t\d+$")
    shape: list[int] = Field(max_length=16)
    dtype: _DTYPE | None
    stored: _DTYPE
    sample: str

    @model_validator(mode="after")
    def _sample_fits_the_shape(self) -> CachedArg:
        """The sample's bytes are the shape's elements in the stored dtype: a worker
        reshapes them, so a wrong length is caught here, not as a crash in a batch."""
        try:
            raw = base64.b64decode(self.sample, validate=True)
        except ValueError:
            raise ValueError("sample: not base64") from None
        if any(d < 0 for d in self.shape):
            raise ValueError(f"shape {self.shape}: a negative size")
        need = math.prod(self.shape) * ITEMSIZE[self.stored]
        if len(raw) != need:
            raise ValueError(f"sample: {len(raw)} bytes where shape {self.shape} of "
                             f"{self.stored} holds {need}")
        return self


# What a cached call may be: the grammar `render` writes, and nothing a file could smuggle
# in. The cache is outside the gate's control (a restored CI cache, XDG_CACHE_HOME), and the
# sweep compiles the text, so it is read as data: an op of torch's operator namespaces or a
# tensor's method, on the variant's tensors and literals. No underscore names (dunders), no
# torch function that reads, writes or loads (torch.load, torch.hub, ...), no builtins.
_NAMESPACES = (("torch",), ("torch", "special"), ("torch", "linalg"), ("torch", "fft"),
               ("torch", "nn", "functional"))
_NOT_OPS = frozenset({"load", "save", "from_file", "hub", "jit", "compile", "export", "onnx",
                      "utils", "package", "serialization", "library", "ops", "cuda",
                      "backends", "distributed", "multiprocessing", "set_default_device",
                      "set_default_dtype", "set_default_tensor_type", "manual_seed", "seed",
                      "set_printoptions", "set_num_threads", "set_rng_state",
                      "use_deterministic_algorithms", "classes", "storage", "autograd"})
# Tensor methods that leave torch (to numpy, to a file) or call back into Python.
_NOT_METHODS = frozenset({"numpy", "tofile", "dump", "dumps", "apply_", "map_", "map2_",
                          "register_hook", "register_post_accumulate_grad_hook", "backward",
                          "untyped_storage", "share_memory_", "pin_memory", "save"})
_CONSTANT_ATTRS = {("math", "nan"), ("math", "inf")}


def call_problem(call: str) -> str:
    """Why `call` is not a call the OpInfo builder could have written ('' when it is)."""
    import ast

    try:
        tree = ast.parse(call, mode="eval")
    except SyntaxError as exc:
        return f"not an expression ({exc.msg})"

    def chain(node: ast.expr) -> tuple[str, ...] | None:
        if isinstance(node, ast.Name):
            return (node.id,)
        if isinstance(node, ast.Attribute):
            head = chain(node.value)
            return None if head is None else (*head, node.attr)
        return None

    def value(node: ast.expr) -> str:
        """'' for an argument: a tensor name, a literal, torch.<dtype-like>, math.nan/inf."""
        if isinstance(node, ast.Constant):
            return ""
        if isinstance(node, ast.Name):
            return "" if re.fullmatch(r"t\d+", node.id) else f"the name {node.id!r}"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return value(node.operand)
        if isinstance(node, (ast.List, ast.Tuple)):
            return next((w for w in map(value, node.elts) if w), "")
        if isinstance(node, ast.Attribute):
            names = chain(node)
            if names in _CONSTANT_ATTRS or (names and len(names) == 2 and names[0] == "torch"
                                            and not names[1].startswith("_")
                                            and names[1] not in _NOT_OPS):
                return ""  # torch.float32, torch.contiguous_format
            return expression(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "slice" and not node.keywords:
            return next((w for w in map(value, node.args) if w), "")
        return expression(node)

    def expression(node: ast.expr) -> str:
        """'' for the op: namespace.op(...), tensor.method(...), tensor.attribute."""
        target = node.func if isinstance(node, ast.Call) else node
        if not isinstance(target, ast.Attribute) or target.attr.startswith("_"):
            return f"{ast.unparse(target)[:60]!r} is not an op"
        names = chain(target)
        if names is not None and names[:-1] in _NAMESPACES:
            if names[-1] in _NOT_OPS:
                return f"{'.'.join(names)} is not an op"
        elif target.attr in _NOT_METHODS:
            return f".{target.attr} is not an op"
        elif value(target.value) and expression(target.value):
            return f"{ast.unparse(target.value)[:60]!r} is not a tensor or an op's result"
        if isinstance(node, ast.Call):
            parts = [*node.args, *(k.value for k in node.keywords)]
            if any(k.arg is None for k in node.keywords):
                return "a ** argument"
            return next((w for w in map(value, parts) if w), "")
        return ""

    return expression(tree.body)


class CachedVariant(_Strict):
    id: str = Field(pattern=rf"^{re.escape(PREFIX)}[A-Za-z0-9_.-]+\.\d+$")
    family: str = Field(min_length=1)
    call: str = Field(min_length=1)
    dtypes: list[_DTYPE] = Field(min_length=1)
    classes: list[Literal["normal", "specials", "empty", "range"]] = Field(min_length=1)
    ranged: bool | None
    shape_only: list[int]
    args: list[CachedArg]

    @model_validator(mode="after")
    def _call_is_data(self) -> CachedVariant:
        problem = call_problem(self.call)
        if problem:
            raise ValueError(f"call {self.call[:80]!r}: {problem} (the cache holds data "
                             "only; this one was not written by parity-gate)")
        return self


class CachedVariants(_Strict):
    """The whole cache file, as `write` produces it."""

    torch: str
    format: int
    ops: list[str] | None
    dropped: dict[str, int]
    variants: list[CachedVariant]

    @model_validator(mode="after")
    def _unique_ids(self) -> CachedVariants:
        seen: set[str] = set()
        for v in self.variants:
            if v.id in seen:
                raise ValueError(f"variant id {v.id!r} twice")
            seen.add(v.id)
        return self


def read(path: Path, version: str) -> tuple[CachedVariants | None, str]:
    """The cache validated as a whole, or None and why it cannot be used ('' where it is
    simply absent or of another torch or format: a rebuild is expected, nothing to say)."""
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError, EOFError) as err:
        return None, f"unreadable ({type(err).__name__}: {err})"[:300]
    if isinstance(data, dict) and (data.get("torch") != version or
                                   data.get("format") != FORMAT):
        return None, ""
    try:
        return CachedVariants.model_validate(data), ""
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" and {err.error_count() - 1} more" if err.error_count() > 1 else ""
        return None, (f"malformed OpInfo variant cache ({where}: {first['msg']}{more}; "
                      f"expected the file `python -m parity_gate.ops.opinfo` writes)")


def generate(path: Path, ops: tuple[str, ...] | None) -> None:
    """Build in a fresh interpreter: torch and the OpInfo database stay out of the parent."""
    cmd = [sys.executable, "-m", "parity_gate.ops.opinfo", "--write", str(path)]
    if ops is not None:
        cmd += ["--ops", ",".join(ops)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False,
                              env={**os.environ, "PYTHONHASHSEED": HASH_SEED})
    except subprocess.TimeoutExpired:
        raise UserError("ops: building the OpInfo variants took over 30 minutes "
                        "(expected about a minute; is the machine swapping?)") from None
    if done.returncode == 2:
        raise UserError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:]
        raise RuntimeError(f"building the OpInfo variants failed (exit {done.returncode}): "
                           f"{tail}")


# --------------------------------------------------------------------------
# records ↔ JSON (pure)


def to_json(v: OpVariant) -> dict[str, Any]:
    return {"id": v.id, "family": v.family, "call": v.call, "dtypes": list(v.dtypes),
            "classes": list(v.input_classes), "ranged": v.ranged,
            "shape_only": list(v.shape_only),
            "args": [{"name": a.name, "shape": list(a.shape), "dtype": a.dtype,
                      "stored": a.stored, "sample": base64.b64encode(a.sample).decode()}
                     for a in v.args]}


def from_json(d: CachedVariant) -> OpVariant:
    args = tuple(Arg(a.name, tuple(a.shape), kind="sample", dtype=a.dtype,
                     stored=a.stored, sample=base64.b64decode(a.sample))
                 for a in d.args)
    return OpVariant(d.id, d.family, d.call, args, tuple(d.dtypes), tuple(d.classes),
                     shape_only=tuple(d.shape_only), ranged=d.ranged)


# --------------------------------------------------------------------------
# building (inside a torch process)


def family(info: Any) -> str:
    """`oi.<namespace>` for namespaced ops (nn, linalg, special, fft ...), else the kind
    of OpInfo (unary, binary, reduction ...), else `oi.tensor`."""
    head = info.name.split(".")[0]
    if "." in info.name:
        return PREFIX + head
    kind = type(info).__name__
    for key, name in (("Unary", "unary"), ("Binary", "binary"), ("Reduction", "reduction"),
                      ("Spectral", "fft"), ("Shape", "shape")):
        if key in kind:
            return PREFIX + name
    return PREFIX + "tensor"


def ranged(info: Any) -> bool:
    return "Unary" in type(info).__name__ or info.name.startswith("special.")


FUNCTION, METHOD, ATTRIBUTE, SWAPPED = "function", "method", "attribute", "swapped"


def spellings(info: Any) -> list[tuple[str, str]]:
    """How a call may name the op, best first, as `(text, kind)`: the public torch
    path or `torch.ops.aten...` the OpInfo's callable is; else, for an anonymous
    callable (a lambda), the Tensor method, Tensor attribute (`x.mT`) or torch function
    of the OpInfo's name, and that function with the sample's first two arguments
    swapped (lambdas that reorder them: `F.embedding(idx, weight)`,
    `torch.einsum(equation, tensors)`), which `build` keeps only where it gives the
    lambda's answer."""
    import torch

    op = info.op
    if isinstance(op, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return [("torch.ops." + str(op), FUNCTION)]
    named: list[tuple[str, str]] = []
    for path in (info.name, getattr(op, "__name__", "") or ""):
        obj: Any = torch
        for part in path.split(".") if path else ["\0"]:
            obj = getattr(obj, part, None)
        if obj is not None and obj is op:
            return [("torch." + path, FUNCTION)]
    name = info.name
    if info.method_variant is not None and getattr(torch.Tensor, name, None) is \
            info.method_variant:
        return [(name, METHOD)]
    if "." not in name:
        member = getattr(torch.Tensor, name, None)
        if callable(member):
            named.append((name, METHOD))
        elif member is not None and hasattr(member, "__get__"):  # a property: x.mT, x.H
            named.append((name, ATTRIBUTE))
    obj = torch
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if callable(obj):
        named += [("torch." + name, FUNCTION), ("torch." + name, SWAPPED)]
    return named


class Unrenderable(Exception):
    """A sample value the call text cannot spell (a module, a generator, complex ...)."""


def render_value(value: Any, tensors: list[Any]) -> str:
    """A sample's argument as call text; each tensor becomes the next graph input."""
    import torch

    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return f"t{len(tensors) - 1}"
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "math.nan"
        if math.isinf(value):
            return "math.inf" if value > 0 else "-math.inf"
        return repr(value)
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, torch.Size):
        value = tuple(value)
    if isinstance(value, (list, tuple)):
        inner = [render_value(v, tensors) for v in value]
        if isinstance(value, list):
            return f"[{', '.join(inner)}]"
        return f"({inner[0]},)" if len(inner) == 1 else f"({', '.join(inner)})"
    if isinstance(value, slice):
        return repr(value)
    if value is Ellipsis:
        return "..."
    raise Unrenderable(type(value).__name__)


def render(spelling: tuple[str, str], sample: Any) -> tuple[str, list[Any]]:
    text, kind = spelling
    tensors: list[Any] = []
    first = render_value(sample.input, tensors)
    rest = [render_value(a, tensors) for a in sample.args]
    keywords = [f"{k}={render_value(v, tensors)}" for k, v in sample.kwargs.items()]
    if kind == METHOD:
        return f"{first}.{text}({', '.join([*rest, *keywords])})", tensors
    if kind == ATTRIBUTE:
        if rest or keywords:
            raise Unrenderable("arguments to a Tensor attribute")
        return f"{first}.{text}", tensors
    if kind == SWAPPED:
        if not rest:
            raise Unrenderable("a single positional argument to swap")
        return f"{text}({', '.join([rest[0], first, *rest[1:], *keywords])})", tensors
    return f"{text}({', '.join([first, *rest, *keywords])})", tensors


def real_view(call: str) -> str:
    """A call whose one output is complex, as real pairs (the exporter's representation)."""
    return f"torch.view_as_real({call})"


def _arg(name: str, t: Any, reference: str = "float32") -> Arg:
    """Float tensors, and tensors of the dtype the samples were made in (`reference`: int64
    for integer-only ops), follow the case dtype; the others keep their values and dtype."""
    import numpy as np
    import torch

    dtype = str(t.dtype).removeprefix("torch.")
    if t.layout != torch.strided:
        raise Unrenderable(f"a {str(t.layout).removeprefix('torch.')} tensor")
    if dtype not in _DTYPE_NAMES or t.is_complex():
        raise Unrenderable(f"a {dtype} tensor")
    values = t.detach().contiguous()
    if t.is_floating_point():
        data = values.to(dtype=torch.float32).numpy().astype("<f4")
        return Arg(name, tuple(t.shape), kind="sample", stored="float32", sample=data.tobytes())
    array = values.numpy()
    data = array.astype(array.dtype.newbyteorder("<"))
    return Arg(name, tuple(t.shape), kind="sample", dtype=None if dtype == reference else dtype,
               stored=dtype, sample=np.ascontiguousarray(data).tobytes())


def variant_id(info: Any, k: int) -> str:
    base = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
    return f"{PREFIX}{_ID_CHARS.sub('_', base)}.{k}"


# Two evaluations of one call agree when they differ by no more than rounding noise: BLAS,
# LAPACK and vectorised kernels round differently with the memory they are handed, so an
# exact check kept a different set of samples (hence case ids) on each build.
NOISE_ULPS = 64


def _same(a: Any, b: Any) -> bool:
    """Same structure, shapes and dtypes; integers and the NaN/inf pattern exactly; finite
    floats within NOISE_ULPS units of the larger magnitude of the two tensors (norm-wise)."""
    import torch

    from parity_gate.engine.tensors import leaves

    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb) or not la:
        return False
    for x, y in zip(la, lb, strict=True):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            return False
        if x.shape != y.shape or x.dtype != y.dtype or x.is_complex() or \
                x.layout != torch.strided or y.layout != torch.strided:
            return False
        x, y = x.detach(), y.detach()
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        finite = torch.isfinite(x)
        if not torch.equal(finite, torch.isfinite(y)) or \
                not torch.equal(x.isnan(), y.isnan()) or \
                not torch.equal(x[x.isinf()], y[x.isinf()]):
            return False
        xs, ys = x[finite].double(), y[finite].double()
        if not xs.numel():
            continue
        scale = float(torch.maximum(xs.abs().max(), ys.abs().max()))
        if float((xs - ys).abs().max()) > NOISE_ULPS * torch.finfo(x.dtype).eps * scale:
            return False
    return True


@dataclass(frozen=True)
class _Tools:
    """The worker functions a variant is checked with (imported lazily: torch is heavy)."""

    compile_call: Any
    make_inputs: Any
    to_torch: Any
    leaves: Any

    @classmethod
    def load(cls) -> _Tools:
        from parity_gate.engine.tensors import leaves, to_torch
        from parity_gate.ops.inputs import make_inputs
        from parity_gate.ops.worker import compile_call

        return cls(compile_call, make_inputs, to_torch, leaves)

    def run(self, v: OpVariant, reference: str, times: int = 1) -> list[Any]:
        """The variant's call on its normal inputs in `reference` dtype, `times` times on
        the same inputs (fresh tensors each time: a call may write into its input)."""
        inputs = self.make_inputs(v, reference, NORMAL)
        fn = self.compile_call(v, 0)
        return [fn(*[self.to_torch(inputs[a.name]) for a in v.args]) for _ in range(times)]


@dataclass(frozen=True)
class _Op:
    """One OpInfo as the sweep sees it: the dtypes it supports, the dtype its samples are
    drawn in, the element cap for its samples."""

    info: Any
    dtypes: tuple[str, ...]
    reference: str
    cap: float
    tools: _Tools


def build(ops: tuple[str, ...] | None = None) -> tuple[list[OpVariant], Counter[str]]:
    """Every renderable, deterministic OpInfo sample as a variant, with the dtypes eager
    accepts measured as `ops.accepted` measures them (normal inputs, each dtype)."""
    import warnings

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    tools = _Tools.load()
    dropped: Counter[str] = Counter()
    out: list[OpVariant] = []
    for info in op_db:
        if ops is None or info.name in ops:
            out.extend(_op_variants(info, tools, dropped))
    return out, dropped


def _op_variants(info: Any, tools: _Tools, dropped: Counter[str]) -> list[OpVariant]:
    """One OpInfo's samples as variants (the first CROSS ones crossed with special and
    empty inputs); each dropped sample counted under its reason."""
    from parity_gate.ops.accepted import probe

    if info.name in RANDOM or info.name.startswith("jiterator"):
        dropped["random or uninitialised values"] += 1
        return []
    op, samples, why = _samples(info, tools)
    if op is None:
        dropped[why] += 1
        return []
    ways = spellings(info)
    if not ways:
        dropped["an anonymous callable without a torch name"] += len(samples)
        return []
    out: list[OpVariant] = []
    for k, sample in enumerate(samples):
        cross = len(out) < CROSS
        v, reason = None, ""
        for way in ways:
            v, reason = _variant(op, k, sample, way, cross)
            if not reason:
                break
        if reason or v is None:
            dropped[reason] += 1
            continue
        if info.name in TIES:
            v = _ties(v, op)
        accepted = probe({v.id: v}, [v.id])[v.id]
        if not accepted:
            dropped["eager accepts no dtype on the sample"] += 1
            continue
        out.append(OpVariant(v.id, v.family, v.call, v.args, tuple(accepted),
                             v.input_classes, shape_only=v.shape_only, ranged=v.ranged))
    return out


def _samples(info: Any, tools: _Tools) -> tuple[_Op | None, list[Any], str]:
    """The OpInfo's CPU samples in the first dtype the sweep runs that it supports, drawn
    under a seed of its own (generators draw from torch, `random` and numpy)."""
    import random

    import numpy as np
    import torch

    from parity_gate.engine.fixtures import derive_seed

    supported = {str(d).removeprefix("torch.") for d in info.supported_dtypes("cpu")}
    reference = next((d for d in REFERENCE if d in supported), None)
    if reference is None:
        return None, [], "no dtype the sweep runs (complex only)"
    seed = derive_seed("opinfo", info.name, info.variant_test_name)
    torch.manual_seed(seed % 2**63)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        samples = list(info.sample_inputs("cpu", getattr(torch, reference),
                                          requires_grad=False))
    except Exception:
        return None, [], "the OpInfo's sample generator raises"
    dtypes = tuple(d for d in ("float32", "float64", "float16", "bfloat16", "int8",
                               "int32", "int64", "uint8", "bool") if d in supported)
    # an OpInfo whose every sample is big still runs its smallest one
    cap = max(MAX_ELEMENTS, min((_elements(s) for s in samples), default=0))
    return _Op(info, dtypes, reference, cap, tools), samples, ""


def _elements(sample: Any) -> float:
    """How many tensor elements a sample holds (inf if it cannot be rendered)."""
    tensors: list[Any] = []
    try:
        render_value([sample.input, *sample.args, *sample.kwargs.values()], tensors)
    except Exception:
        return math.inf
    return sum(int(t.numel()) for t in tensors)


COMPLEX_OUTPUT = "a complex output (the exporter represents complex as real pairs)"


def _variant(op: _Op, k: int, sample: Any, way: tuple[str, str],
             cross: bool) -> tuple[OpVariant | None, str]:
    """The sample as a variant spelled `way`, or why it cannot be one. A call whose one
    output is complex is compared as `torch.view_as_real(call)`, the exporter's
    representation of complex values."""
    try:
        call, tensors = render(way, sample)
        args = tuple(_arg(f"t{i}", t, op.reference) for i, t in enumerate(tensors))
    except Unrenderable as why:
        return None, f"the sample holds {why}"
    except Exception as exc:  # a tensor subclass, a meta tensor ...
        return None, f"the sample cannot be stored ({type(exc).__name__})"
    if not args:
        return None, "the sample has no tensor"
    if sum(int(t.numel()) for t in tensors) > op.cap:
        return None, f"over {MAX_ELEMENTS} elements"
    v = OpVariant(variant_id(op.info, k), family(op.info), call, args,
                  op.dtypes or ("float32",), (NORMAL, SPECIALS, EMPTY) if cross else (NORMAL,),
                  ranged=cross and ranged(op.info))
    try:
        reason = _faithful(v, op, sample)
        if reason == COMPLEX_OUTPUT:
            v = dataclasses.replace(v, call=real_view(call))
            reason = _faithful(v, op, sample, real=True)
    except Exception as exc:  # a sparse or nested output: nothing to compare
        reason = f"the output cannot be compared ({type(exc).__name__})"
    return v, reason


def _faithful(v: OpVariant, op: _Op, sample: Any, real: bool = False) -> str:
    """Why the rendered call is not the OpInfo's own call on these values ("" if it is):
    it must run, give the same answer as `info.op(sample)`, twice, and return tensors.
    `real`: the call is wrapped in `torch.view_as_real`, the OpInfo's answer is too."""
    import torch

    try:
        with torch.no_grad():
            expected = op.info.op(sample.input, *sample.args, **sample.kwargs)
            if real:
                expected = torch.view_as_real(expected.resolve_conj())
            got, again = op.tools.run(v, op.reference, times=2)
    except Exception:
        return "eager rejects the rendered sample"
    if any(isinstance(t, torch.Tensor) and t.is_complex() for t in op.tools.leaves(expected)):
        return COMPLEX_OUTPUT
    if not _same(got, again):
        return "two eager runs differ"
    if not _same(expected, got):
        return "the rendered call does not reproduce the OpInfo call"
    return ""


def _ties(v: OpVariant, op: _Op) -> OpVariant:
    """Integer outputs of sort/topk/median... are indices: among ties any is right."""
    import torch

    with torch.no_grad():
        out = op.tools.leaves(op.tools.run(v, op.reference)[0])
    index = tuple(m for m, t in enumerate(out)
                  if isinstance(t, torch.Tensor) and not t.is_floating_point()
                  and t.dtype != torch.bool)
    return dataclasses.replace(v, shape_only=index)


def write(path: Path, ops: tuple[str, ...] | None) -> tuple[int, Counter[str]]:
    found, dropped = build(ops)
    text = json.dumps({"torch": torch_version(), "format": FORMAT, "ops": ops,
                       "dropped": dict(dropped.most_common()),
                       "variants": [to_json(v) for v in found]})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.compress(text.encode("utf-8"), 6))
    tmp.replace(path)
    return len(found), dropped


def main(argv: list[str]) -> int:
    """`python -m parity_gate.ops.opinfo --write PATH [--ops a,b]` (exit 2 without
    expecttest), or `--stats` to print what the installed torch yields."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m parity_gate.ops.opinfo")
    p.add_argument("--write", type=Path, default=None)
    p.add_argument("--ops", default=None)
    args = p.parse_args(argv)
    try:
        import expecttest  # noqa: F401  (the OpInfo database imports it)
    except ImportError:
        print("ops --source opinfo: PyTorch's OpInfo database needs the expecttest package "
              "(expected it installed: pip install expecttest, or parity-gate[test])",
              file=sys.stderr)
        return 2
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:  # the same ids on every build
        os.execve(sys.executable, [sys.executable, "-m", "parity_gate.ops.opinfo", *argv],
                  {**os.environ, "PYTHONHASHSEED": HASH_SEED})
    ops = tuple(sorted(args.ops.split(","))) if args.ops else None
    path = args.write or cache_path(torch_version(), ops)
    count, dropped = write(path, ops)
    print(f"wrote {path}: {count} variants; dropped {sum(dropped.values())} samples",
          file=sys.stderr)
    for why, n in dropped.most_common():
        print(f"  {n:>6}  {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

