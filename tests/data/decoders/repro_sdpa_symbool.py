"""Repro: a cached decode step exported from a one-token example fails in torch.export.

torch 2.13.0, transformers 5.24.0 (CPU). A tiny seeded LlamaForCausalLM step with its
KV cache (past length 7) and a dynamic query length, exported with torch.onnx.export
(dynamo) from an example whose query is one token long (the decode step itself), fails in
torch.export: "scaled_dot_product_attention(): argument 'is_causal' must be bool, not
SymBool". transformers' SDPA path passes `is_causal = query.shape[2] > 1` when the
all-ones mask is skipped, and the dynamic one-long dim makes that a SymBool. From a
3-token example the same step exports and matches eager at query lengths 1 and 5 (the
decoder zoo's `step` set exports at seq 5). Exit 1: it reproduces; exit 0: it exported.

    python tests/data/decoders/repro_sdpa_symbool.py
"""

from __future__ import annotations

import sys

import torch
import transformers as tf

torch.manual_seed(0)
cfg = tf.LlamaConfig(vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64)
model = tf.LlamaForCausalLM(cfg).eval()


class Step(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor) -> torch.Tensor:
        cache = tf.DynamicCache(config=cfg)
        cache.update(key, value, 0)
        return self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                          use_cache=True).logits


b, s, p, t = (torch.export.Dim(n) for n in ("batch", "seq", "past", "past_seq"))
example = {"input_ids": torch.randint(0, 96, (2, 1)),  # one new token: a decode step
           "attention_mask": torch.ones(2, 8, dtype=torch.int64),
           "key": torch.randn(2, 2, 7, 8), "value": torch.randn(2, 2, 7, 8)}
shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: t},
          "key": {0: b, 2: p}, "value": {0: b, 2: p}}
try:
    torch.onnx.export(Step().eval(), (), kwargs=example, dynamic_shapes=shapes, dynamo=True,
                      verbose=False)
except Exception as exc:  # the exporter raises its own error types
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    print(f"reproduced: {type(root).__name__}: {str(root).splitlines()[0][:300]}")
    sys.exit(1)
print("exported: not reproduced")
