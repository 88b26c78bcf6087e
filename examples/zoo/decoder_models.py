"""Tiny cached decoders (and encoder-decoders) from transformers configs, seeded weights.

The decoder zoo of `decoders.yml`: each model is built from its config class at a tiny
size with `use_cache` on, so the gate can declare its KV cache, export one decoding
step with the cache flattened, and run greedy generation through it. Nothing is
downloaded. `build(arch=...)` is the factory every module names; the gate seeds torch
before calling it.
"""

from __future__ import annotations

from typing import Any

import transformers as tf

_DECODER = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 64, "use_cache": True}

# name -> (config class, model class, config keywords)
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # learned positions, multi-head attention (kv heads = heads)
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             {"vocab_size": 96, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
              "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "use_cache": True,
              "initializer_range": 0.2}),
    # rotary positions, grouped-query attention (2 kv heads for 4 query heads)
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(_DECODER)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(_DECODER)),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**_DECODER, "sliding_window": 32}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_DECODER, "pad_token_id": 0}),
    # sliding windows that a 6-token prompt and 16 steps cross (window 8)
    "mistral_window": ("MistralConfig", "MistralForCausalLM", {**_DECODER, "sliding_window": 8}),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM",
                   {**_DECODER, "sliding_window": 8, "bos_token_id": 0, "eos_token_id": 0}),
    # sliding and global layers alternate: the layers' caches end with different lengths
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {**_DECODER, "head_dim": 8, "sliding_window": 8, "pad_token_id": 0}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {**_DECODER, "head_dim": 8, "sliding_window": 8, "pad_token_id": 0,
                "layer_types": ["sliding_attention", "full_attention"]}),
    # multi-query attention: one KV head, while the config's num_kv_heads says 4
    "falcon": ("FalconConfig", "FalconForCausalLM",
               {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 4, "multi_query": True,
                "new_decoder_architecture": False, "use_cache": True,
                "max_position_embeddings": 64}),
    # a state cache (conv and recurrent states), no keys and values: `check` refuses it
    "mamba": ("MambaConfig", "MambaForCausalLM",
              {"vocab_size": 96, "hidden_size": 32, "state_size": 8, "num_hidden_layers": 2,
               "use_cache": True}),
    # more rotary / learned-position decoders (multi-head and grouped-query)
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "intermediate_size": 48,
                  "max_position_embeddings": 64, "use_cache": True}),
    "opt": ("OPTConfig", "OPTForCausalLM",
            {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 4, "ffn_dim": 48, "word_embed_proj_dim": 32,
             "max_position_embeddings": 64, "use_cache": True, "pad_token_id": 1,
             "bos_token_id": 2, "eos_token_id": 2}),
    "bloom": ("BloomConfig", "BloomForCausalLM",
              {"vocab_size": 96, "hidden_size": 32, "n_layer": 2, "n_head": 4,
               "use_cache": True}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(_DECODER)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {**_DECODER, "pad_token_id": 0,
                                                "eos_token_id": 0}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(_DECODER)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_DECODER, "head_dim": 8}),
    "cohere": ("CohereConfig", "CohereForCausalLM", {**_DECODER, "pad_token_id": 0,
                                                   "bos_token_id": 0, "eos_token_id": 0}),
    # encoder-decoders: the decoder step with the self-attention cache
    "t5": ("T5Config", "T5ForConditionalGeneration",
           {"vocab_size": 96, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2,
            "num_heads": 4, "use_cache": True, "decoder_start_token_id": 0,
            "initializer_factor": 3.0}),
    "whisper": ("WhisperConfig", "WhisperForConditionalGeneration",
                {"vocab_size": 96, "num_mel_bins": 16, "d_model": 32, "encoder_layers": 2,
                 "decoder_layers": 2, "encoder_attention_heads": 4,
                 "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48,
                 "max_source_positions": 16, "max_target_positions": 64, "pad_token_id": 0,
                 "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1,
                 "use_cache": True, "suppress_tokens": [], "begin_suppress_tokens": [],
                 "init_std": 0.2}),
}


def build(arch: str, **config: Any) -> Any:
    """The architecture `arch` with seeded random weights; `config` overrides its keywords
    (e.g. `attn_implementation: eager`)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r} (expected one of: "
                         f"{', '.join(ARCHITECTURES)})")
    config_name, model_name, defaults = ARCHITECTURES[arch]
    cfg = getattr(tf, config_name)(**{**defaults, **config})
    return getattr(tf, model_name)(cfg)
