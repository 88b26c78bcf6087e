"""What the gate's generation check costs against a hand-written loop doing the same work.

Both arms start a fresh process that builds the same tiny seeded Llama (GQA), exports one
decoding step with its KV cache flattened (torch.onnx.export, dynamo, the same options),
opens one ONNX Runtime session, compares one cached step (past length 7) and runs a
16-step greedy generation in eager (the model's own DynamicCache) and in ONNX Runtime
(each step's present cache fed back as past), comparing tokens and per-step logits.
The gate arm is `parity-gate run` on a one-module manifest (--no-cache --no-localise, and
`defaults.performance.measure: false`: the latency check is work the loop does not do, and
benchmarks/performance_overhead.py bounds its cost);
the hand arm is `hand()` below, in a subprocess. Arms alternate so load that comes and
goes hits both; the figure is the ratio of medians (target <= 1.1). Also printed: the
bytes the cache tensors add per step (measured on the feeds) against the layout's
formula, and each arm's peak RSS.

    python benchmarks/generation_overhead.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = 16
CONFIG = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
          "max_position_embeddings": 64, "use_cache": True}
MANIFEST = f"""
version: 1
seed: 0
python_path: [{ROOT / 'examples' / 'zoo'}]
defaults:
  batch_sizes: [1]
  dtypes: [float32]
  performance: {{measure: false}}  # timing against eager: its cost is performance_overhead's
providers: {{cpu: {{required: true}}}}
fixtures:
  step:
    kind: random
    dims: {{seq: 3}}
    inputs:
      input_ids: {{shape: [batch, seq], dtype: int64, high: 96}}
      attention_mask: {{shape: [batch, seq], dtype: int64}}
  prompt:
    kind: random
    dims: {{seq: 6}}
    inputs:
      input_ids: {{shape: [batch, seq], dtype: int64, high: 96}}
modules:
  - name: llama
    factory: decoder_models:build
    kwargs: {{arch: llama}}
    inputs:
      - {{name: input_ids, dynamic: {{0: batch, 1: seq}}}}
      - {{name: attention_mask, dynamic: {{0: batch, 1: seq}}}}
    cache: {{past_lengths: [7]}}
    generation: {{steps: {STEPS}, prompt: prompt}}
    fixtures: [step]
"""


def hand() -> dict[str, Any]:
    """The same work written by hand: export, one cached step, 16 greedy steps each side."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(**CONFIG)
    model = tf.LlamaForCausalLM(cfg).eval()
    layers, heads, dim = 2, 2, 8
    names = [f"past_{i}_{p}" for i in range(layers) for p in ("key", "value")]

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, past_0_key: Any,
                    past_0_value: Any, past_1_key: Any, past_1_value: Any) -> Any:
            cache = tf.DynamicCache(config=cfg)
            past = (past_0_key, past_0_value, past_1_key, past_1_value)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                             use_cache=True)
            got = {"logits": out.logits}
            for i in range(layers):
                got[f"present.{i}.key"] = out.cache.layers[i].keys
                got[f"present.{i}.value"] = out.cache.layers[i].values
            return got

    step = Step().eval()
    b, s, p, t = (torch.export.Dim(n) for n in ("batch", "seq", "past", "past_seq"))
    example = {"input_ids": torch.randint(0, 96, (2, 3)),
               "attention_mask": torch.ones(2, 10, dtype=torch.int64),
               **{n: torch.randn(2, heads, 7, dim) for n in names}}
    shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: t},
              **{n: {0: b, 2: p} for n in names}}
    outputs = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    program = torch.onnx.export(step, (), kwargs=example, dynamic_shapes=shapes, dynamo=True,
                                output_names=outputs, optimize=True, verbose=False)
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.random.randint(0, 96, (1, 3)),
             "attention_mask": np.ones((1, 10), dtype=np.int64),
             **{n: np.random.randn(1, heads, 7, dim).astype(np.float32) for n in names}}
    with torch.inference_mode():
        ref = step(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    got = session.run(None, feeds)
    assert all(np.allclose(r.numpy(), g, atol=1e-5, rtol=1e-3)
               for r, g in zip(ref.values(), got, strict=True))
    t0 = time.perf_counter()
    prompt = torch.randint(0, 96, (1, 6))
    eager_tokens, eager_logits = [], []
    with torch.inference_mode():
        cache, ids, seen = tf.DynamicCache(config=cfg), prompt, 6
        for _ in range(STEPS):
            out = model(input_ids=ids, attention_mask=torch.ones(1, seen, dtype=torch.int64),
                        cache=cache, use_cache=True)
            cache, last = out.cache, out.logits[:, -1]
            eager_logits.append(last.numpy())
            ids = last.argmax(-1, keepdim=True)
            eager_tokens.append(int(ids))
            seen += 1
    onnx_tokens, cache_bytes = [], []
    ids_np, seen = prompt.numpy(), 6
    past = {n: np.zeros((1, heads, 0, dim), np.float32) for n in names}
    for i in range(STEPS):
        cache_bytes.append(sum(a.nbytes for a in past.values()))
        out = dict(zip(outputs, session.run(None, {
            "input_ids": ids_np, "attention_mask": np.ones((1, seen), np.int64), **past}),
            strict=True))
        last = out["logits"][:, -1]
        assert np.allclose(last, eager_logits[i], atol=1e-5, rtol=1e-3)
        ids_np = last.argmax(-1)[:, None]
        onnx_tokens.append(int(ids_np[0, 0]))
        past = {n: out[f"present.{n.split('_')[1]}.{n.split('_')[2]}"] for n in names}
        seen += 1
    assert onnx_tokens == eager_tokens
    return {"steps_s": time.perf_counter() - t0, "cache_bytes": cache_bytes}


def once(cmd: list[str]) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, f"{cmd[2:4]} exited {code}"
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hand", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hand:
        print(json.dumps(hand()))
        return 0
    env_path = str(ROOT)
    os.environ["PYTHONPATH"] = env_path + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ["HF_HUB_OFFLINE"] = "1"
    times: dict[str, list[float]] = {"gate": [], "hand": []}
    rss: dict[str, float] = {"gate": 0.0, "hand": 0.0}
    gate_steps: list[float] = []
    hand_steps: list[float] = []
    hand_bytes: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "parity.yml"
        path.write_text(MANIFEST)
        for r in range(args.rounds):
            for arm in (("gate", "hand") if r % 2 == 0 else ("hand", "gate")):
                out_dir = Path(tmp) / f"r{r}"
                cmd = ([sys.executable, "-m", "parity_gate", "run", str(path), "--out",
                        str(out_dir), "--quiet", "--no-cache", "--no-localise", "--jobs", "1"]
                       if arm == "gate" else [sys.executable, __file__, "--hand"])
                seconds, peak, text = once(cmd)
                times[arm].append(seconds)
                rss[arm] = max(rss[arm], peak)
                if arm == "gate":
                    data = json.loads((out_dir / "results.json").read_text())
                    gen = next(c for c in data["cases"] if c["generation"] is not None)
                    assert gen["outcome"] == "pass", gen["reason"]
                    gate_steps.append(gen["timings"]["eager_s"] + gen["timings"]["run_s"])
                else:
                    got = json.loads(text.strip().splitlines()[-1])
                    hand_steps.append(got["steps_s"])
                    hand_bytes = got["cache_bytes"]
                print(f"round {r + 1} {arm}: {seconds:.1f}s, peak RSS {peak:.0f} MiB", flush=True)
    gate_s, hand_s = statistics.median(times["gate"]), statistics.median(times["hand"])
    print(f"median gate {gate_s:.1f}s, hand-written {hand_s:.1f}s: ratio {gate_s / hand_s:.2f}")
    g, h = statistics.median(gate_steps), statistics.median(hand_steps)
    print(f"the {STEPS} steps alone (eager + ONNX Runtime): gate {g * 1000:.0f} ms, "
          f"hand-written {h * 1000:.0f} ms: ratio {g / h:.2f}")
    print(f"peak RSS gate {rss['gate']:.0f} MiB (the largest of the gate and its worker), "
          f"hand-written {rss['hand']:.0f} MiB")
    from parity_gate.engine.kvcache import Layout

    lay = Layout("decoder", 2, 2, 8, 64, "attention_mask")
    formula = [lay.cache_bytes(1, 6 + i - 1 if i else 0, 4) for i in range(STEPS)]
    assert hand_bytes == formula, (hand_bytes, formula)
    print(f"cache tensors fed per step (measured = 2 x layers x batch x kv_heads x past x "
          f"head_dim x 4 bytes): step 1 {hand_bytes[0]} B, step {STEPS} {hand_bytes[-1]} B")
    big = Layout("decoder", 32, 8, 128, 8192, "attention_mask")  # an 8B Llama-3's layout
    print(f"the same formula for a Llama-3-8B layout (32 layers, 8 kv heads, head dim 128) at "
          f"past 2048, float16, batch 1: {big.cache_bytes(1, 2048, 2) / 2**20:.0f} MiB per "
          "step's past, and again as the present outputs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
