"""Decoders with a KV cache: the cache's layout from the model's config, the module the
gate exports (flat tensors in, flat tensors out), and the job rewritten to feed it.

A transformers decoder takes its cache as a `DynamicCache` (an `EncoderDecoderCache` for
T5 or Whisper), which neither a fixture nor an ONNX graph can hold. `CachedStep`
takes the cache as tensors `past_<i>_key`/`past_<i>_value` (graph inputs with the past
length a dynamic dim), builds the model's own cache object from them, calls the model
exactly as a generation loop does, and returns the logits and every layer's present
cache as named outputs (`present.<i>.key`), so eager and the export are compared output
by output like any other module. Worker-side only (imports torch lazily).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, replace
from typing import Any

from parity_gate.hazards.context import GateDims
from parity_gate.manifest.models import CacheSpec, InputSpec, ModuleSpec, TensorSpec
from parity_gate.plan.cases import GENERATE, ModuleJob

PAST = "past"            # the past length's dim symbol
SPAN = "past_seq"        # the mask's last dim: past + new tokens
WINDOW = "past_window"   # a sliding-window layer's cache length: min(past, window - 1)
_PAST_ID = re.compile(r"@past=(\d+)")
# forward()'s cache parameter (and the output field): `cache` from transformers 5.2x,
# `past_key_values` before
CACHE_ARGS = ("cache", "past_key_values")


@dataclass(frozen=True)
class LayerCache:
    """One layer's cache as the model keeps it: [batch, kv_heads, length, dim] for its key
    and value, the length the whole past or (`window`) its last `window - 1` tokens."""

    kv_heads: int
    key_dim: int
    value_dim: int
    window: int | None = None


@dataclass(frozen=True)
class Layout:
    """What the cache tensors look like: [batch, kv_heads, past, head_dim] per layer
    (`per_layer`: each layer's own heads, dims and window, as the model really keeps them;
    empty: every layer alike, from the config)."""

    kind: str
    layers: int
    kv_heads: int
    head_dim: int
    max_positions: int | None
    mask: str | None
    start_token: int = 0  # encoder-decoder: the decoder's first token
    arg: str = "cache"    # forward()'s cache parameter
    per_layer: tuple[LayerCache, ...] = ()

    def layer(self, i: int) -> LayerCache:
        return self.per_layer[i] if self.per_layer else LayerCache(
            self.kv_heads, self.head_dim, self.head_dim)

    @property
    def windowed(self) -> bool:
        """Some layer keeps only a window: its cache length is not the past length."""
        return any(layer.window for layer in self.per_layer)

    def past_dim(self, i: int) -> str:
        """Layer i's cache-length dim symbol."""
        window = self.layer(i).window
        if not window:
            return PAST
        windows = sorted({w.window for w in self.per_layer if w.window})
        return WINDOW if len(windows) == 1 else f"{WINDOW}_{window}"

    def cache_length(self, i: int, past: int) -> int:
        """Layer i's cache length after `past` tokens (a window keeps its last window - 1)."""
        window = self.layer(i).window
        return min(past, window - 1) if window else past

    def past_shape(self, name: str, batch: int, past: int) -> tuple[int, int, int, int]:
        """The shape of past tensor `past_<i>_<key|value>` after `past` tokens."""
        _, i, part = name.split("_")
        layer = self.layer(int(i))
        return (batch, layer.kv_heads, self.cache_length(int(i), past),
                layer.key_dim if part == "key" else layer.value_dim)

    @property
    def past_names(self) -> list[str]:
        return [f"past_{i}_{part}" for i in range(self.layers) for part in ("key", "value")]

    @property
    def present_names(self) -> list[str]:
        return [f"present.{i}.{part}" for i in range(self.layers) for part in ("key", "value")]

    def cache_bytes(self, batch: int, past: int, itemsize: int) -> int:
        """Bytes of one full cache (every layer's key and value) at this past length."""
        total = 0
        for name in self.past_names:
            b, heads, length, dim = self.past_shape(name, batch, past)
            total += b * heads * length * dim * itemsize
        return total


def past_length(fixture_id: str) -> int:
    """The past length a cached module's fixture id names (`text@seq=8@past=7` → 7)."""
    m = _PAST_ID.search(fixture_id)
    return int(m.group(1)) if m else 0


def _first(config: Any, *names: str) -> Any:
    return next((getattr(config, n) for n in names if getattr(config, n, None) is not None),
                None)


def layout(model: Any, module: ModuleSpec) -> tuple[Layout | None, list[str]]:
    """The cache layout from the model's config, and every located problem with the
    declaration: a model with no cache, a past length (or a generation) beyond its
    maximum positions, a generation check on a model that cannot generate."""
    spec = module.cache
    if spec is None:
        return None, []
    owner = type(model).__name__
    arg, problems = _cache_argument(model, module, owner)
    if problems:
        return None, problems
    config = model.config
    enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    if enc_dec != (spec.kind == "encoder_decoder"):
        want = "encoder_decoder" if enc_dec else "decoder"
        problems.append(f"{module.locate('cache.kind')}: {owner} is "
                        f"{'an encoder-decoder' if enc_dec else 'a decoder-only model'} "
                        f"(expected kind: {want})")
        return None, problems
    state = state_cache(model)
    if state:
        problems.append(f"{module.locate('cache')}: {owner} keeps a state cache ({state}), "
                        "not attention keys and values: the gate exports and compares KV "
                        "caches only (expected a decoder whose every layer caches keys and "
                        "values; drop `cache:` and `generation:` to compare its forward pass)")
        return None, problems
    layers, kv_heads, head_dim, max_pos = _dimensions(config, enc_dec)
    names = [i.name for i in module.inputs]
    mask = spec.mask if spec.mask is not None else (
        "attention_mask" if not enc_dec and "attention_mask" in names else None)
    problems += _declaration_problems(module, spec, owner, mask, max_pos)
    start = _first(config, "decoder_start_token_id", "bos_token_id") or 0
    return Layout(spec.kind, int(layers), int(kv_heads), int(head_dim),
                  int(max_pos) if max_pos else None, mask, int(start), arg), problems


def _cache_argument(model: Any, module: ModuleSpec, owner: str) -> tuple[str, list[str]]:
    """The forward() parameter the cache is passed as; or, for a model that has no KV
    cache to declare (no transformers config, no cache parameter, or not a generative
    decoder), the located problems with its `cache` (and `generation`) declaration."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    can_generate = bool(getattr(model, "can_generate", lambda: False)())
    arg = next((n for n in CACHE_ARGS if n in params), "")
    config = getattr(model, "config", None)
    if config is not None and arg and can_generate:
        return arg, []
    why = ("has no transformers config" if config is None else
           "takes no cache (no `cache` or `past_key_values` parameter)" if not arg else
           "is not a generative decoder (can_generate() is False: an encoder)")
    problems = [f"{module.locate('cache')}: {owner} {why}, so it has no KV cache to "
                "declare (expected a decoder such as *ForCausalLM or an "
                "encoder-decoder *ForConditionalGeneration)"]
    if module.generation is not None:
        problems.append(f"{module.locate('generation')}: {owner} cannot generate "
                        "(expected a decoder with an LM head)")
    return arg, problems


def _dimensions(config: Any, enc_dec: bool) -> tuple[Any, Any, Any, Any]:
    """Decoder layers, KV heads, head size and maximum positions, read under each
    family's config names (an encoder-decoder's are its decoder's; a decoder's KV heads
    may be fewer than its query heads)."""
    if enc_dec:
        heads = _first(config, "decoder_attention_heads", "num_heads", "num_attention_heads")
        return (_first(config, "num_decoder_layers", "decoder_layers", "num_layers"), heads,
                _first(config, "d_kv") or (_first(config, "d_model", "hidden_size") // heads),
                _first(config, "max_target_positions"))
    heads = _first(config, "num_attention_heads", "n_head")
    return (_first(config, "num_hidden_layers", "n_layer"),
            _first(config, "num_key_value_heads") or heads,
            _first(config, "head_dim") or (_first(config, "hidden_size", "n_embd") // heads
                                           if heads else 0),
            _first(config, "max_position_embeddings", "n_positions"))


def _declaration_problems(module: ModuleSpec, spec: CacheSpec, owner: str, mask: str | None,
                          max_pos: Any) -> list[str]:
    """Located problems of a declaration the model can hold: input names the cache step
    cannot pass by keyword, a mask that is no input, past lengths or a generation that
    run past the model's positions."""
    problems: list[str] = []
    names = [i.name for i in module.inputs]
    for j, name in enumerate(names):
        if not name.isidentifier():
            problems.append(f"{module.locate(f'inputs[{j}].name')}: {name!r} is not a Python "
                            "identifier (expected a forward() parameter name: the cache step "
                            "passes inputs by keyword)")
    if mask is not None and mask not in names:
        problems.append(f"{module.locate('cache.mask')}: {mask!r} is not one of the module's "
                        f"inputs (expected one of: {', '.join(names)})")
    if max_pos:
        for j, past in enumerate(spec.past_lengths):
            if past >= max_pos:
                problems.append(f"{module.locate(f'cache.past_lengths[{j}]')}: past length "
                                f"{past} leaves no room for a new token within {owner}'s "
                                f"{max_pos} positions (expected at most {max_pos - 1})")
        gen = module.generation
        if gen is not None and gen.steps >= max_pos:
            problems.append(f"{module.locate('generation.steps')}: {gen.steps} steps run past "
                            f"{owner}'s {max_pos} positions (expected fewer)")
    return problems


def window_problems(lay: Layout, module: ModuleSpec, owner: str) -> list[str]:
    """A windowed cache needs the tokens seen so far beside it: the mask carries them."""
    if not lay.windowed or lay.mask is not None:
        return []
    windows = sorted({w.window for w in lay.per_layer if w.window})
    return [f"{module.locate('cache.mask')}: {owner} keeps a sliding-window cache (window "
            f"{', '.join(map(str, windows))}), whose length stops saying how many tokens came "
            "before once the window fills; the attention mask over past and new tokens "
            "says it (expected an attention_mask input, or `cache.mask` naming it)"]


def state_cache(model: Any) -> str:
    """What a model keeps instead of keys and values in some layers (mamba's conv and
    recurrent states, a hybrid's linear-attention layers), read from the cache its config
    builds; empty when every layer caches keys and values."""
    try:
        from transformers.cache_utils import DynamicCache, LinearAttentionCacheLayerMixin

        layers = DynamicCache(config=model.config).layers
    except Exception:  # no such classes, or a config DynamicCache cannot read
        return ""
    states = [i for i, layer in enumerate(layers)
              if isinstance(layer, LinearAttentionCacheLayerMixin)]
    if not states:
        return ""
    kind = type(layers[states[0]]).__name__
    return (f"{kind} in every layer" if len(states) == len(layers) else
            f"{kind} in layer(s) {', '.join(map(str, states))} of {len(layers)}")


def observed(model: Any, lay: Layout) -> Layout:
    """A decoder's layout as the model really keeps its cache: one token run through it
    with its own cache object, each layer's heads and dims read from what it stored
    (falcon's multi-query attention keeps one KV head whatever its config says) and its
    window from the layer class the config builds (gemma2/3: sliding and global layers).
    An encoder-decoder, or a model the probe cannot run, keeps the config's layout."""
    if lay.kind != "decoder":
        return lay
    import torch
    from transformers import DynamicCache

    try:
        device = next(model.parameters()).device
        with torch.inference_mode():
            out = model(input_ids=torch.zeros(1, 1, dtype=torch.int64, device=device),
                        use_cache=True, **{lay.arg: DynamicCache(config=model.config)})
        layers = returned_cache(out).layers
        per_layer = tuple(LayerCache(int(layer.keys.shape[1]), int(layer.keys.shape[-1]),
                                     int(layer.values.shape[-1]),
                                     int(layer.sliding_window)
                                     if getattr(layer, "is_sliding", False) else None)
                          for layer in layers)
    except Exception:  # the step's own run says what is wrong, as a case outcome
        return lay
    return replace(lay, layers=len(per_layer), kv_heads=per_layer[0].kv_heads,
                   head_dim=per_layer[0].key_dim, per_layer=per_layer)


def cached_module(model: Any, lay: Layout, declared: list[str]) -> Any:
    """`model` behind a forward() taking the declared inputs and the flat cache by keyword
    (a real signature: the binding checks it and the export names graph inputs after it)."""
    import torch

    params = [*declared, *lay.past_names]
    namespace: dict[str, Any] = {}
    exec(f"def forward(self, {', '.join(params)}):\n"  # identifiers: `layout` checks
         f"    return self.step({{{', '.join(f'{p!r}: {p}' for p in params)}}})\n",
         namespace)

    class CachedStep(torch.nn.Module):
        """One decoding step of the model with its cache as flat tensors."""

        forward = namespace["forward"]

        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.layout = lay

        def step(self, feeds: dict[str, Any]) -> dict[str, Any]:
            past = [feeds.pop(n) for n in lay.past_names]
            cache = build_cache(self.model, lay, past, seen(lay, feeds))
            if lay.kind == "encoder_decoder":
                enc = feeds.pop("encoder_hidden_states")
                out = self.model(encoder_outputs=(enc,), use_cache=True, **feeds,
                                 **{lay.arg: cache})
            else:
                out = self.model(use_cache=True, **feeds, **{lay.arg: cache})
            return {"logits": out.logits, **present(returned_cache(out), lay)}

        def transformers_inputs(self, feeds: dict[str, Any]
                                ) -> tuple[Any, dict[str, Any], dict[str, str], list[str]]:
            """For transformers' exporter: the model, its inputs with the cache object, the
            graph names it gives the cache → the gate's names, and the outputs to keep."""
            past = [feeds.pop(n) for n in lay.past_names]
            feeds = {**feeds, lay.arg: build_cache(self.model, lay, past, seen(lay, feeds)),
                     "use_cache": True}
            if lay.kind == "encoder_decoder":
                feeds["encoder_outputs"] = (feeds.pop("encoder_hidden_states"),)
            rename = {f"{side}encoder_outputs.0": "encoder_hidden_states"
                      for side in ("", "input.")}
            for i in range(lay.layers):
                for part, plural in (("key", "keys"), ("value", "values")):
                    for side, gate in (("input", f"past_{i}_{part}"),
                                       ("output", f"present.{i}.{part}")):
                        rename[f"{side}.{lay.arg}.layers.{i}.{plural}"] = gate
                        rename[f"{side}.{lay.arg}.self_attention_cache.layers.{i}.{plural}"] \
                            = gate
            return self.model, feeds, rename, ["logits", *lay.present_names]

    return CachedStep().eval()  # the wrapper itself must not be in training mode


def seen(lay: Layout, feeds: dict[str, Any]) -> Any:
    """The tokens before this step, when a windowed layer's cache length cannot say it:
    the mask spans them and the new tokens (`past + seq == past_seq`, the gate's own
    assumption); None for a model whose every layer keeps its whole past."""
    if not lay.windowed or lay.mask is None or lay.mask not in feeds:
        return None
    ids = feeds.get("input_ids", feeds.get("inputs_embeds"))
    return feeds[lay.mask].shape[-1] - ids.shape[1] if ids is not None else None


def build_cache(model: Any, lay: Layout, past: list[Any], total: Any = None) -> Any:
    """The model's own cache object holding `past` (key, value per layer); the
    encoder-decoder's cross-attention cache starts empty, filled from the encoder states.
    `total`: the tokens seen so far, for the step module of a windowed model, whose
    sliding layers then say their mask sizes without a branch on the past length
    (`_window_layer`), so one export serves before and after the window fills."""
    from transformers import DynamicCache, EncoderDecoderCache

    cache = DynamicCache(config=model.config)
    if total is not None:
        window = _window_layer()
        cache.layers = [window(sliding_window=getattr(layer, "sliding_window", 0))
                        if getattr(layer, "is_sliding", False) else layer
                        for layer in cache.layers]
    for i in range(lay.layers):
        cache.update(past[2 * i], past[2 * i + 1], i)
    if total is not None:
        for layer in cache.layers:
            if getattr(layer, "is_sliding", False):
                layer.cumulative_length = total  # type: ignore[union-attr]
    if lay.kind == "encoder_decoder":
        return EncoderDecoderCache(cache, DynamicCache(config=model.config))
    return cache


def _window_layer() -> Any:
    """transformers' sliding-window layer whose mask sizes are read from its cache length
    (what it keeps: min(seen, window - 1)) and the tokens seen, with no `seen >= window`
    branch: the same sizes, but a traced export keeps the past length dynamic on both
    sides of the window instead of specialising to one."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    class FlatWindowLayer(DynamicSlidingWindowLayer):
        def get_mask_sizes(self, query_length: int) -> tuple[Any, Any]:
            kept = self.keys.shape[-2] if self.keys is not None and self.is_initialized else 0
            return kept + query_length, self.cumulative_length - kept

    return FlatWindowLayer


def returned_cache(out: Any) -> Any:
    """The cache a model output carries (`cache`, or `past_key_values` before 5.2x)."""
    return next(getattr(out, n) for n in CACHE_ARGS if getattr(out, n, None) is not None)


def present(cache: Any, lay: Layout) -> dict[str, Any]:
    """Every layer's present key and value (the self-attention cache of an encoder-decoder)."""
    own = getattr(cache, "self_attention_cache", cache)
    out: dict[str, Any] = {}
    for i in range(lay.layers):
        layer = own.layers[i]
        out[f"present.{i}.key"] = layer.keys
        out[f"present.{i}.value"] = layer.values
    return out


def rewrite(job: ModuleJob, lay: Layout) -> ModuleJob:
    """The job with the cache inputs declared and every fixture set providing them at
    its past length (the mask spans past + new tokens, all attended)."""
    inputs = [spec.model_copy(update={"dynamic": {**spec.dynamic, max(
        spec.dynamic, default=1): SPAN}}) if spec.name == lay.mask else spec
              for spec in job.module.inputs]
    inputs += [InputSpec(name=n, dynamic={0: "batch", 2: lay.past_dim(int(n.split("_")[1]))})
               for n in lay.past_names]
    module = job.module.model_copy(update={"inputs": inputs})
    fixtures = {fid: fx if GENERATE in fid or not hasattr(fx, "inputs")
                else _with_cache(fx, lay, past_length(fid)) for fid, fx in job.fixtures.items()}
    return replace(job, module=module, fixtures=fixtures, gate=gate_dims(job, lay, inputs))


def gate_dims(job: ModuleJob, lay: Layout, inputs: list[InputSpec]) -> GateDims:
    """What the gate's own feeding fixes about the step's dims: the mask spans past and
    new tokens (`past_seq = past + seq`), and the sizes its cases reach: each past length
    declared, and a generation's last step (the prompt, then one token a step)."""
    ids = next((s for s in inputs if s.name in ("input_ids", "decoder_input_ids")), None)
    seq = ids.dynamic.get(1) if ids is not None else None
    mask = next((s for s in inputs if s.name == lay.mask), None)
    sums = {SPAN: (PAST, seq)} if seq and mask is not None and SPAN in mask.dynamic.values() \
        else {}
    reach: dict[str, tuple[int, str]] = {}
    past = max((past_length(f) for f in job.fixtures if GENERATE not in f), default=0)
    if past:
        reach[PAST] = (past, "the largest past length the manifest declares")
    gen = job.module.generation
    prompt = next((fx for f, fx in job.fixtures.items() if GENERATE in f), None)
    first = 1 if lay.kind == "encoder_decoder" else _length(prompt, "input_ids")
    if gen is not None and first and gen.steps > 1:
        why = f"the generation ({first} prompt tokens, {gen.steps} steps)"
        if first + gen.steps - 2 > past:
            reach[PAST] = (first + gen.steps - 2, f"the past length {why} reaches")
        if sums:
            reach[SPAN] = (first + gen.steps - 1, f"the mask length {why} reaches")
    if PAST in reach:
        for i in range(lay.layers):
            size = lay.cache_length(i, reach[PAST][0])
            reach.setdefault(lay.past_dim(i), (size, f"a window's length at {reach[PAST][1]}"))
    return GateDims(sums, reach)


def _length(fixture: Any, name: str) -> int:
    """A fixture set's length of input `name` (dim 1; the largest size declared), 0 when
    the set does not say."""
    spec = getattr(fixture, "inputs", {}).get(name) if fixture is not None else None
    if spec is None or len(spec.shape) < 2:
        return 0
    size = spec.shape[1]
    size = fixture.dims.get(size, 0) if isinstance(size, str) else size
    return max(size) if isinstance(size, list) else int(size or 0)


def _with_cache(fixture: Any, lay: Layout, past: int) -> Any:
    tensors = dict(fixture.inputs)
    if lay.mask is not None and lay.mask in tensors:
        mask = tensors[lay.mask]
        last = mask.shape[-1]
        size = fixture.dims.get(last, last) if isinstance(last, str) else last
        tensors[lay.mask] = TensorSpec(shape=[*mask.shape[:-1], int(size) + past],
                                       dtype=mask.dtype, distribution="randint", low=1, high=2,
                                       specials=[])
    for name in lay.past_names:
        _, heads, length, dim = lay.past_shape(name, 1, past)
        tensors[name] = TensorSpec(shape=["batch", heads, length, dim])
    return fixture.model_copy(update={"inputs": tensors})



def declared_problems(manifest: Any, manifest_path: Any) -> list[str]:
    """Every `cache:` declaration checked against its model, as `parity-gate check` does:
    only the model can say it keeps no KV cache (an encoder, a state-space model) or where
    its window lies. Builds each such module from its factory (seeded, on the CPU); a
    factory that fails is left to `run`, which reports it as the module's outcome."""
    from parity_gate.engine.factory import build_module
    from parity_gate.plan.cases import plan
    from parity_gate.plan.providers import EXECUTION_PROVIDERS

    problems: list[str] = []
    for job in plan(manifest, manifest_path, list(EXECUTION_PROVIDERS.values())).jobs:
        if job.module.cache is None:
            continue
        try:
            model = build_module(job).eval()
        except Exception:
            continue
        lay, found = layout(model, job.module)
        if lay is not None and not found:
            found = window_problems(observed(model, lay), job.module, type(model).__name__)
        problems += found
    return problems
