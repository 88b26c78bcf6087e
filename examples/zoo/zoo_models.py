"""Tiny Hugging Face architectures built from their config classes, with seeded random weights.

Nothing is downloaded: every model is constructed from a `transformers` config
at a tiny size (a few layers, hidden size 32), so the zoo runs offline in
seconds per architecture. The gate seeds torch before calling `build`, so the
weights are the same on every run. Models come back as transformers builds them
(in training mode, as `from_config` leaves them): the gate calls `.eval()` and
says so once per model.

Each entry of `ARCHITECTURES` is (config class, model class, config keywords), by name;
`build(arch=...)` is the factory every module of `parity.yml` names.
"""

from __future__ import annotations

from typing import Any

import transformers as tf

_TEXT = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 48, "max_position_embeddings": 64}
_CLASSES = {"num_labels": 5}
_VISION = {"image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_size": 32,
           "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48,
           "num_labels": 5}
_DECODER = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 64, "use_cache": False}

# name -> (config class, model class, config keywords), by name: transformers imports a
# model's code on first use, so a worker that builds two models imports two, not 26
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # encoders, with a sequence-classification head (top-1 agreement is checked)
    "bert": ("BertConfig", "BertForSequenceClassification", {**_TEXT, **_CLASSES}),
    "roberta": ("RobertaConfig", "RobertaForSequenceClassification",
                {**_TEXT, **_CLASSES, "pad_token_id": 1}),
    "distilbert": ("DistilBertConfig", "DistilBertForSequenceClassification",
                   {"vocab_size": 96, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 48,
                    "max_position_embeddings": 64, **_CLASSES}),
    "albert": ("AlbertConfig", "AlbertForSequenceClassification",
               {**_TEXT, "embedding_size": 16, **_CLASSES}),
    "electra": ("ElectraConfig", "ElectraForSequenceClassification",
                {**_TEXT, "embedding_size": 16, **_CLASSES}),
    # raw encoder: a ModelOutput with two fields (last_hidden_state, pooler_output)
    "bert_base": ("BertConfig", "BertModel", dict(_TEXT)),
    # decoders: GPT-2 (learned positions), Llama and Qwen2 (rotary embeddings)
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             {"vocab_size": 96, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
              "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "use_cache": False}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(_DECODER)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(_DECODER)),
    # encoder-decoders: the encoder alone and the full model
    "t5_encoder": ("T5Config", "T5EncoderModel",
                   {"vocab_size": 96, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2,
                    "num_heads": 4, "use_cache": False}),
    "t5": ("T5Config", "T5Model",
           {"vocab_size": 96, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2,
            "num_heads": 4, "use_cache": False}),
    "bart_encoder": ("BartConfig", "encoder",
                     {"vocab_size": 96, "d_model": 32, "encoder_layers": 2,
                      "decoder_layers": 2, "encoder_attention_heads": 4,
                      "decoder_attention_heads": 4, "encoder_ffn_dim": 48,
                      "decoder_ffn_dim": 48, "max_position_embeddings": 64,
                      "use_cache": False}),
    "bart": ("BartConfig", "BartModel",
             {"vocab_size": 96, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
              "encoder_attention_heads": 4, "decoder_attention_heads": 4,
              "encoder_ffn_dim": 48, "decoder_ffn_dim": 48, "max_position_embeddings": 64,
              "use_cache": False}),
    # vision, with an image-classification head
    "vit": ("ViTConfig", "ViTForImageClassification", dict(_VISION)),
    "deit": ("DeiTConfig", "DeiTForImageClassification", dict(_VISION)),
    "beit": ("BeitConfig", "BeitForImageClassification", dict(_VISION)),
    "swin": ("SwinConfig", "SwinForImageClassification",
             {"image_size": 32, "patch_size": 2, "num_channels": 3, "embed_dim": 16,
              "depths": [1, 1], "num_heads": [2, 4], "window_size": 4, "num_labels": 5}),
    "convnext": ("ConvNextConfig", "ConvNextForImageClassification",
                 {"num_channels": 3, "num_stages": 2, "hidden_sizes": [16, 32],
                  "depths": [1, 1], "num_labels": 5}),
    "resnet": ("ResNetConfig", "ResNetForImageClassification",
               {"num_channels": 3, "embedding_size": 16, "hidden_sizes": [16, 32],
                "depths": [1, 1], "layer_type": "basic", "num_labels": 5}),
    "mobilenet_v2": ("MobileNetV2Config", "MobileNetV2ForImageClassification",
                     {"num_channels": 3, "image_size": 32, "depth_multiplier": 0.35,
                      "num_labels": 5}),
    "mobilevit": ("MobileViTConfig", "MobileViTForImageClassification",
                  {"num_channels": 3, "image_size": 32, "patch_size": 2,
                   "hidden_sizes": [16, 24, 32], "neck_hidden_sizes": [8, 8, 16, 16, 24, 32, 48],
                   "num_attention_heads": 2, "num_labels": 5}),
    # audio
    "whisper_encoder": ("WhisperConfig", "encoder",
                        {"vocab_size": 96, "num_mel_bins": 16, "d_model": 32,
                         "encoder_layers": 2, "decoder_layers": 2,
                         "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                         "encoder_ffn_dim": 48, "decoder_ffn_dim": 48,
                         "max_source_positions": 16, "max_target_positions": 32,
                         "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                         "decoder_start_token_id": 1, "use_cache": False}),
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2ForSequenceClassification",
                 {"vocab_size": 32, "hidden_size": 32, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "intermediate_size": 48,
                  "conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3],
                  "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4,
                  "classifier_proj_size": 16, "num_labels": 5}),
    # CLIP towers
    "clip_text": ("CLIPTextConfig", "CLIPTextModel",
                  {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
                   "num_hidden_layers": 2, "num_attention_heads": 4,
                   "max_position_embeddings": 64, "pad_token_id": 1, "bos_token_id": 0,
                   "eos_token_id": 2}),
    "clip_vision": ("CLIPVisionConfig", "CLIPVisionModel",
                    {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "image_size": 32, "patch_size": 8}),
}


def build(arch: str, **config: Any) -> Any:
    """The architecture `arch` with seeded random weights; `config` overrides its keywords
    (e.g. `attn_implementation: eager`)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r} (expected one of: "
                         f"{', '.join(ARCHITECTURES)})")
    config_name, model_name, defaults = ARCHITECTURES[arch]
    cfg = getattr(tf, config_name)(**{**defaults, **config})
    if model_name == "encoder":  # the encoder of an encoder-decoder model, on its own
        full = getattr(tf, config_name.replace("Config", "Model"))
        return full(cfg).get_encoder()
    return _trained_like(getattr(tf, model_name)(cfg))


def _trained_like(model: Any) -> Any:
    """A CNN's weights and batch norms at the scale of a trained network's.

    transformers initialises convolutions with std 0.02 and batch norms as identities;
    through a deep CNN that collapses every logit to ~1e-30, which no export could get
    wrong. He initialisation keeps activations (and logits) at scale, and spread
    running statistics make BatchNorm do real work (and its folding into the
    convolutions a real source of float16 error). Seeded by the gate like the rest;
    models without batch norm keep transformers' own initialisation.
    """
    import torch

    norms = torch.nn.modules.batchnorm._BatchNorm
    if not any(isinstance(m, norms) for m in model.modules()):
        return model
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):  # variance-preserving (He)
                torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    m.bias.normal_(0.0, 0.1)
            elif isinstance(m, norms):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model
