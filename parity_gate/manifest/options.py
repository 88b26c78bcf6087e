"""The option names the manifest passes through to torch and ONNX Runtime, kept in one place.

Both take options as a bag of names: `torch.onnx.export(**options)` raises a TypeError
only in the worker after the module was built, and ONNX Runtime's CPU provider ignores
every option it is given without a word, so a typo would silently test the defaults.
The manifest refuses unknown names instead, where they are written. The tables are
static because validation must not import torch or onnxruntime (it stays fast);
tests/test_limits.py checks the export table against the installed torch's signature.
"""

from __future__ import annotations

from parity_gate.manifest.located import did_you_mean

# torch 2.13's `torch.onnx.export` keyword parameters a manifest may set in
# `export.options` (the real signature minus the ones below, which parity-gate sets).
EXPORT_OPTIONS: tuple[str, ...] = (
    "external_data", "custom_translation_table", "report", "verify", "profile",
    "dump_exported_program", "artifacts_dir", "export_params", "keep_initializers_as_inputs",
    "training", "operator_export_type", "do_constant_folding", "custom_opsets",
    "export_modules_as_functions", "autograd_inlining",
)

# Parameters parity-gate passes itself → the manifest key that controls each.
EXPORT_SET_BY_GATE: dict[str, str] = {
    "model": "the module comes from `factory`",
    "args": "the inputs come from the fixture sets",
    "kwargs": "the inputs come from the fixture sets",
    "f": "parity-gate keeps the exported model in memory",
    "dynamo": "choose the exporter with `export.exporter`",
    "opset_version": "set it with `export.opset`",
    "optimize": "set it with `export.optimize`",
    "input_names": "the names come from `inputs[].name`",
    "output_names": "the names come from `outputs[].name`",
    "dynamic_shapes": "declare dynamic dims with `inputs[].dynamic`",
    "dynamic_axes": "declare dynamic dims with `inputs[].dynamic`",
    "verbose": "parity-gate records the exporter's warnings itself",
}

# ONNX Runtime provider option names, from its provider sources (cuda_execution_provider_info.cc,
# tensorrt_execution_provider_info.cc) and the onnxruntime.ai execution-provider pages.
# The CPU provider takes none from Python: it ignores whatever it is given.
PROVIDER_OPTIONS: dict[str, tuple[str, ...]] = {
    "cpu": (),
    "cuda": (
        "device_id", "has_user_compute_stream", "user_compute_stream", "gpu_mem_limit",
        "arena_extend_strategy", "cudnn_conv_algo_search", "do_copy_in_default_stream",
        "gpu_external_alloc", "gpu_external_free", "gpu_external_empty_cache",
        "cudnn_conv_use_max_workspace", "enable_cuda_graph", "cudnn_conv1d_pad_to_nc1d",
        "tunable_op_enable", "tunable_op_tuning_enable", "tunable_op_max_tuning_duration_ms",
        "enable_skip_layer_norm_strict_mode", "prefer_nhwc", "use_ep_level_unified_stream",
        "use_tf32", "sdpa_kernel", "fuse_conv_bias",
    ),
    "tensorrt": (
        "device_id", "has_user_compute_stream", "user_compute_stream",
        "trt_max_partition_iterations", "trt_min_subgraph_size", "trt_max_workspace_size",
        "trt_fp16_enable", "trt_bf16_enable", "trt_int8_enable",
        "trt_int8_calibration_table_name", "trt_int8_use_native_calibration_table",
        "trt_dla_enable", "trt_dla_core", "trt_dump_subgraphs", "trt_engine_cache_enable",
        "trt_engine_cache_path", "trt_weight_stripped_engine_enable",
        "trt_onnx_model_folder_path", "trt_engine_cache_prefix", "trt_engine_decryption_enable",
        "trt_engine_decryption_lib_path", "trt_force_sequential_engine_build",
        "trt_context_memory_sharing_enable", "trt_layer_norm_fp32_fallback",
        "trt_timing_cache_enable", "trt_timing_cache_path", "trt_force_timing_cache",
        "trt_detailed_build_log", "trt_build_heuristics_enable", "trt_sparsity_enable",
        "trt_builder_optimization_level", "trt_auxiliary_streams", "trt_tactic_sources",
        "trt_extra_plugin_lib_paths", "trt_profile_min_shapes", "trt_profile_max_shapes",
        "trt_profile_opt_shapes", "trt_cuda_graph_enable", "trt_ep_context_embed_mode",
        "trt_ep_context_file_path", "trt_dump_ep_context_model", "trt_engine_hw_compatible",
        "trt_onnx_bytestream", "trt_onnx_bytestream_size", "trt_external_data_bytestream",
        "trt_external_data_bytestream_size", "trt_op_types_to_exclude",
        "trt_preview_features", "trt_load_user_initializer",
    ),
}


def export_option_problem(name: str) -> str | None:
    """Why `name` may not be in `export.options`, or None when torch.onnx.export takes it."""
    if name in EXPORT_OPTIONS:
        return None
    if name in EXPORT_SET_BY_GATE:
        return (f"`{name}` is set by parity-gate (expected it left out: "
                f"{EXPORT_SET_BY_GATE[name]})")
    return (f"unknown torch.onnx.export option{did_you_mean(name, list(EXPORT_OPTIONS))} "
            f"(expected one of: {', '.join(EXPORT_OPTIONS)})")


def provider_option_problem(provider: str, name: str) -> str | None:
    """Why `name` is not an option of `provider`, or None when ONNX Runtime knows it."""
    known = PROVIDER_OPTIONS.get(provider)
    if known is None or name in known:
        return None
    if not known:
        return (f"the {provider} provider takes no options (ONNX Runtime would ignore "
                f"{name!r} silently; expected an empty `options`)")
    return (f"unknown {provider} provider option{did_you_mean(name, list(known))} "
            f"(expected one of: {', '.join(known)})")
