"""Repro: torch.onnx.export (dynamo) fails on a T5 decoder step with its KV cache.

torch 2.13.0, onnxscript 0.7.2, transformers 5.24.0 (CPU). A tiny seeded
T5ForConditionalGeneration's decoder step (decoder_input_ids, encoder states, a
self-attention cache of past length 7, all dims dynamic) fails in the decomposition
step with "Cannot view a tensor with shape [b, s, 4, 8] and strides (32*s, 8, 8*s, 1)
as a tensor with shape (b, s, 32)" at modeling_t5.py's reshape after SDPA attention
(the same defect as the zoo's encoder-only t5, parity-baseline.yml `t5/*`). With
attn_implementation="eager", or through transformers' own exporter
(transformers.exporters.OnnxExporter, which patches SDPA), the same step exports and
matches eager. Exit 1: it reproduces; exit 0: it exported.

    python tests/data/decoders/repro_t5_sdpa_view.py
"""

from __future__ import annotations

import sys

import torch
import transformers as tf

torch.manual_seed(0)
cfg = tf.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                  use_cache=True, decoder_start_token_id=0)
model = tf.T5ForConditionalGeneration(cfg).eval()


class Step(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                k0: torch.Tensor, v0: torch.Tensor, k1: torch.Tensor, v1: torch.Tensor
                ) -> torch.Tensor:
        own = tf.DynamicCache(config=cfg)
        own.update(k0, v0, 0)
        own.update(k1, v1, 1)
        cache = tf.EncoderDecoderCache(own, tf.DynamicCache(config=cfg))
        return self.model(decoder_input_ids=decoder_input_ids,
                          encoder_outputs=(encoder_hidden_states,), cache=cache,
                          use_cache=True).logits


b, t, s, p = (torch.export.Dim(n) for n in ("batch", "tgt", "src", "past"))
past = {n: torch.randn(2, 4, 7, 8) for n in ("k0", "v0", "k1", "v1")}
example = {"decoder_input_ids": torch.randint(0, 96, (2, 4)),
           "encoder_hidden_states": torch.randn(2, 10, 32), **past}
shapes = {"decoder_input_ids": {0: b, 1: t}, "encoder_hidden_states": {0: b, 1: s},
          **{n: {0: b, 2: p} for n in past}}
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
