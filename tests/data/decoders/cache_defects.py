"""Planted cache defects (issue 38): a tiny Llama that is right in eager and wrong only in
its export, each the way a hand-written decoder goes wrong around its cache. Every
defect is a line in `forward` guarded by `torch.compiler.is_exporting()`, so eager keeps
the model's own behaviour and the exported step graph carries the defect:

- baked_prefill: positions start at the export's past length (3), even at the prefill;
- export_mask: the mask hides every token beyond the export's past + new tokens;
- rotary_cut: the positions are read from a table cut at 8 rows (the export's length):
  ONNX Runtime raises once a position reaches 8.
- value_order: each layer's past values are concatenated in the wrong order (the oldest
  token's moved last), so keys and values no longer pair up once there is a past;
- state_offset: the position offset is clamped to the export's past + new tokens (7):
  right until the past passes 7;
- rotary_narrow: the positions are a slice of an 8-row table, so torch.export narrows the
  past length's range to at most 8 while the generation goes further.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers as tf

CONFIG = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
          "max_position_embeddings": 64, "use_cache": True}
EXPORT_PAST = 3   # the past length the manifest exports at
TABLE = 8         # the rotary table's rows the export keeps
EXPORT_SEQ = 7    # the export's past + new tokens (3 + 4)


class DefectiveLlama(tf.LlamaForCausalLM):
    defect = ""

    def forward(self, input_ids: Any = None, attention_mask: Any = None, cache: Any = None,
                **kwargs: Any) -> Any:
        if torch.compiler.is_exporting():
            seq = input_ids.shape[1]
            past = cache.get_seq_length() if cache is not None else 0
            if self.defect == "baked_prefill":
                kwargs["position_ids"] = (torch.arange(seq) + EXPORT_PAST).unsqueeze(0)
            elif self.defect == "export_mask":
                span = attention_mask.shape[-1]
                attention_mask = attention_mask * (torch.arange(span) < EXPORT_PAST + seq)
            elif self.defect == "rotary_cut":
                table = torch.arange(CONFIG["max_position_embeddings"])[:TABLE]
                kwargs["position_ids"] = table.index_select(0, torch.arange(seq) + past
                                                            ).unsqueeze(0)
            elif self.defect == "value_order":
                for layer in cache.layers:
                    layer.values = torch.cat([layer.values[:, :, 1:], layer.values[:, :, :1]], 2)
            elif self.defect == "state_offset":
                offset = (attention_mask.sum(-1, keepdim=True) - seq).clamp(max=EXPORT_SEQ)
                kwargs["position_ids"] = torch.arange(seq) + offset
            elif self.defect == "rotary_narrow":
                table = torch.arange(CONFIG["max_position_embeddings"])[:TABLE]
                kwargs["position_ids"] = table.narrow(0, past, seq).unsqueeze(0)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                               **kwargs)


def build(defect: str = "") -> Any:
    """The tiny Llama with `defect` planted in its export (empty: the correct model)."""
    model = DefectiveLlama(tf.LlamaConfig(**CONFIG))
    model.defect = defect
    return model
