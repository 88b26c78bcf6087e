"""A planted generation defect: a Llama whose position ids ignore the past length, but
only while it is being exported (eager is right), so the exported step graph is right
at the prefill (past 0) and wrong from the first cached step on: generation step 2."""

from __future__ import annotations

from typing import Any

import torch
import transformers as tf

CONFIG = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
          "max_position_embeddings": 64, "use_cache": True}


class PositionBlindLlama(tf.LlamaForCausalLM):
    """Exports `position_ids = arange(seq)`: the rotary offset forgets the cache."""

    def forward(self, input_ids: Any = None, attention_mask: Any = None, cache: Any = None,
                **kwargs: Any) -> Any:
        if torch.compiler.is_exporting():
            kwargs["position_ids"] = torch.arange(input_ids.shape[1]).unsqueeze(0)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                               **kwargs)


def build(defect: bool = True) -> Any:
    """The defective decoder, or (defect: false) the same weights without the defect."""
    cfg = tf.LlamaConfig(**CONFIG)
    return PositionBlindLlama(cfg) if defect else tf.LlamaForCausalLM(cfg)
