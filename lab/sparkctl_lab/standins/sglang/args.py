"""The release's command line, for every flag the stand-in accepts.

``build_parser()`` is ``prepare_server_args``'s parser (prog ``sglang
serve``, sglang:srt/server_args.py:9355) cut down to the flags below. Each
``add_argument`` has the release's option strings, dest, type, default,
choices, nargs and action, as ``ServerArgs.add_cli_args`` builds them from
the dataclass fields (sglang:srt/server_args.py:8214 and
srt/arg_groups/arg_utils.py); helps are the release's, shortened. A flag the
release knows and the stand-in does not is refused here (exit 2) and
accepted there: add it here, from the release, when the roles need it.
A contract test compares the parser with the installed release's.

``parse_args`` gives every field of the release's ``ServerArgs``, in the
dataclass's order: the parsed value for the flags above, the release's
dataclass default for every other field. Those defaults are data, generated
from the pinned release's dataclass by scripts/sglang_server_args.py into
``server_args_<version>.json`` beside this file (regenerate it when the pin
moves; tests/contract/test_server_args_data.py fails until then). What the
release's ``__post_init__`` resolves from the GPU, the model and the
environment for those fields (attention backends, ...) the stand-in cannot
know: it reports the default, as the dataclass declares it.

``server_args_repr`` is the dataclass repr the release logs
(``logger.info(f"{server_args=}")``, sglang:srt/entrypoints/engine.py:1059):
every field in the release's order, api_key and admin_api_key included in
clear, as the release prints them. The launcher and ``sparkctl`` keep the
key out of argv and redact the journal; the stand-in does not hide it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from . import release
from .version import __version__

# The release's parser choices that come from registries
# (sglang:srt/parser/reasoning_parser.py:1628 ReasoningParser.DetectorMap,
# sglang:srt/function_call/function_call_parser.py:63 ToolCallParserEnum).
REASONING_PARSERS = [
    "apertus2509",
    "deepseek-r1",
    "deepseek-v3",
    "deepseek-v4",
    "glm45",
    "hunyuan",
    "gpt-oss",
    "kimi",
    "kimi_k2",
    "kimi_k3",
    "mimo",
    "poolside_v1",
    "qwen3",
    "qwen3-thinking",
    "minimax",
    "minimax-append-think",
    "minimax-m3",
    "step3",
    "step3p5",
    "mistral",
    "nemotron_3",
    "interns1",
    "gemma4",
    "inkling",
    "cohere_command4",
]
TOOL_CALL_PARSERS = [
    "apertus2509",
    "cohere_command4",
    "deepseekv3",
    "deepseekv31",
    "deepseekv32",
    "deepseekv4",
    "glm",
    "glm45",
    "glm47",
    "gpt-oss",
    "kimi_k2",
    "kimi_k3",
    "lfm2",
    "llama3",
    "mimo",
    "minicpm5",
    "mistral",
    "poolside_v1",
    "pythonic",
    "qwen",
    "qwen25",
    "qwen3_coder",
    "step3",
    "step3p5",
    "minimax-m2",
    "minimax-m3",
    "trinity",
    "interns1",
    "hermes",
    "hunyuan",
    "gigachat3",
    "gemma4",
    "inkling",
]
CUDA_GRAPH_BACKENDS = ["full", "breakable", "tc_piecewise", "disabled"]  # Backend.ALL

# The ServerArgs fields the stand-in parses, in the dataclass's order
# (dataclasses.fields(ServerArgs) of 0.5.17; a unit test holds them to the data file's).
FIELDS = (
    "model_path",
    "tokenizer_path",
    "tokenizer_mode",
    "skip_tokenizer_init",
    "load_format",
    "model_loader_extra_config",
    "trust_remote_code",
    "context_length",
    "is_embedding",
    "revision",
    "model_impl",
    "json_model_override_args",
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "mem_fraction_static",
    "max_running_requests",
    "max_queued_requests",
    "max_total_tokens",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "schedule_policy",
    "schedule_conservativeness",
    "page_size",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "num_continuous_decode_steps",
    "enable_mixed_chunk",
    "nccl_port",
    "dist_timeout",
    "dist_init_addr",
    "nnodes",
    "node_rank",
    "tp_size",
    "pp_size",
    "dp_size",
    "enable_dp_attention",
    "enable_p2p_check",
    "device",
    "base_gpu_id",
    "gpu_id_step",
    "random_seed",
    "watchdog_timeout",
    "host",
    "port",
    "skip_server_warmup",
    "warmups",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_ca_certs",
    "ssl_keyfile_password",
    "enable_ssl_refresh",
    "api_key",
    "admin_api_key",
    "served_model_name",
    "weight_version",
    "chat_template",
    "completion_template",
    "file_storage_path",
    "enable_cache_report",
    "reasoning_parser",
    "tool_call_parser",
    "preferred_sampling_params",
    "allow_auto_truncate",
    "stream_interval",
    "stream_response_default_include_usage",
    "log_level",
    "log_level_http",
    "log_requests",
    "log_requests_level",
    "show_time_cost",
    "enable_metrics",
    "enable_metrics_for_all_schedulers",
    "decode_log_interval",
    "attention_backend",
    "sampling_backend",
    "grammar_backend",
    "cuda_graph_backend_decode",
    "cuda_graph_backend_prefill",
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
    "cuda_graph_bs_decode",
    "cuda_graph_bs_prefill",
    "disable_prefill_cuda_graph",
    "disable_decode_cuda_graph",
    "disable_cuda_graph",
    "disable_cuda_graph_padding",
    "enable_nccl_nvls",
    "enable_symm_mem",
    "triton_attention_num_kv_splits",
    "disable_custom_all_reduce",
    "enable_torch_compile",
    "torch_compile_max_bs",
    "speculative_algorithm",
    "ep_size",
    "moe_runner_backend",
    "enable_hierarchical_cache",
    "disaggregation_mode",
    "download_dir",
    "delete_ckpt_after_loading",
    "enable_deterministic_inference",
    "enable_memory_saver",
    "disable_outlines_disk_cache",
)

# Every ServerArgs field of the release this stand-in answers for, with its
# dataclass default (scripts/sglang_server_args.py writes the file).
SERVER_ARGS_FILE = Path(__file__).with_name(f"server_args_{__version__.replace('.', '_')}.json")


class ServerArgsDataError(Exception):
    """The data file is missing, is another release's, or is not the generator's shape."""


def load_release_defaults(path: Path = SERVER_ARGS_FILE) -> dict[str, Any]:
    """Field -> default of the release's ServerArgs, in the dataclass's order."""
    regenerate = "regenerate it with scripts/sglang_server_args.py"
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ServerArgsDataError(f"{path}: {err}; {regenerate}") from None
    fields = document.get("fields") if isinstance(document, dict) else None
    if not isinstance(fields, dict) or not fields:
        raise ServerArgsDataError(f'{path}: no "fields" mapping; {regenerate}')
    if document.get("sglang") != __version__:
        raise ServerArgsDataError(
            f"{path}: the fields of sglang {document.get('sglang')!r}, "
            f"the stand-in answers for {__version__}; {regenerate}"
        )
    unknown = [name for name in FIELDS if name not in fields]
    if unknown:
        raise ServerArgsDataError(
            f"{path}: the stand-in parses {unknown}, which the release's ServerArgs does not have"
        )
    return dict(fields)


def human_readable_int(value: str) -> int:
    """SGLang's integer type for token counts (sglang:srt/utils/common.py:2917): plain, SI
    (k, M, G, T; decimals allowed) or IEC (Ki, Mi, Gi, Ti) suffixes, case-sensitive."""
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. Use an integer "
                    f"IEC value such as '{int(Decimal(number))}{suffix}', or an SI value such as "
                    f"'{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes (1k, 1M), or "
            "IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


def _deprecated(option: str | None, new_flag: str | None) -> None:
    replacement = f" Use '{new_flag}' instead." if new_flag else ""
    release.write(release.DEPRECATED_FLAG(option=option, replacement=replacement))


class DeprecatedStoreTrueAction(argparse.Action):
    """Stores True and warns (sglang:srt/arg_groups/argparse_actions.py:47)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        new_flag: str | None = None,
        nargs: int = 0,
        const: bool = True,
        default: bool = False,
        **kwargs: Any,
    ) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, True)


class DeprecatedAliasStoreAction(argparse.Action):
    """Stores its value under the new flag's dest and warns (argparse_actions.py:103)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        new_flag: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, values)


def build_parser() -> argparse.ArgumentParser:  # noqa: PLR0915 -- one statement per flag
    """``sglang serve``'s parser for the flags the stand-in accepts (see module doc)."""
    p = argparse.ArgumentParser(prog="sglang serve")
    t = "store_true"
    # Model and tokenizer
    p.add_argument(
        "--model-path",
        "--model",
        type=str,
        required=True,
        help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
    )
    p.add_argument("--tokenizer-path", type=str, help="The path of the tokenizer.")
    p.add_argument(
        "--tokenizer-mode",
        type=str,
        default="auto",
        choices=["auto", "slow"],
        help="Tokenizer mode.",
    )
    p.add_argument(
        "--skip-tokenizer-init",
        action=t,
        help="If set, skip init tokenizer and pass input_ids in generate request.",
    )
    p.add_argument(
        "--load-format",
        type=str,
        default="auto",
        choices=[
            "auto",
            "pt",
            "safetensors",
            "npcache",
            "dummy",
            "sharded_state",
            "presharded",
            "gguf",
            "bitsandbytes",
            "mistral",
            "layered",
            "flash_rl",
            "remote",
            "remote_instance",
            "fastsafetensors",
            "private",
            "runai_streamer",
        ],
        help="The format of the model weights to load.",
    )
    p.add_argument(
        "--model-loader-extra-config", type=str, default="{}", help="Extra config for model loader."
    )
    p.add_argument(
        "--trust-remote-code",
        action=t,
        help="Whether or not to allow for custom "
        "models defined on the Hub in their own modeling files.",
    )
    p.add_argument(
        "--context-length", type=human_readable_int, help="The model's maximum context length."
    )
    p.add_argument(
        "--is-embedding", action=t, help="Whether to use a CausalLM as an embedding model."
    )
    p.add_argument("--revision", type=str, help="The specific model version to use.")
    p.add_argument(
        "--model-impl", type=str, default="auto", help="Which implementation of the model to use."
    )
    p.add_argument(
        "--json-model-override-args",
        type=str,
        default="{}",
        help="A dictionary in JSON string format used to override default model configurations.",
    )
    p.add_argument(
        "--dtype",
        type=str,
        default="auto",
        choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
        help="Data type for model weights and activations.",
    )
    p.add_argument(
        "--quantization",
        type=str,
        choices=[
            "awq",
            "fp8",
            "mxfp8",
            "gptq",
            "marlin",
            "gptq_marlin",
            "awq_marlin",
            "bitsandbytes",
            "gguf",
            "modelopt",
            "modelopt_fp8",
            "modelopt_fp4",
            "nvfp4_online",
            "modelopt_mixed",
            "petit_nvfp4",
            "w8a8_int8",
            "w8a8_fp8",
            "moe_wna16",
            "w4afp8",
            "mxfp4",
            "auto-round",
            "auto-round-int8",
            "compressed-tensors",
            "modelslim",
            "mxfp_w4a8",
            "quark",
            "quark_int4fp8_moe",
            "quark_mxfp4",
            "mlx_q4",
            "mlx_q8",
            "unquant",
            "humming",
        ],
        help="The quantization method.",
    )
    p.add_argument(
        "--kv-cache-dtype",
        type=str,
        default="auto",
        choices=[
            "auto",
            "fp8_e5m2",
            "fp8_e4m3",
            "mxfp8",
            "bf16",
            "bfloat16",
            "nvfp4",
            "fp4_mx_block16",
            "fp4_e2m1",
        ],
        help="Data type for kv cache storage.",
    )
    # Memory and scheduling
    p.add_argument(
        "--mem-fraction-static",
        type=float,
        help="The fraction of the memory used "
        "for static allocation (model weights and KV cache memory pool).",
    )
    p.add_argument(
        "--max-running-requests", type=int, help="The maximum number of running requests."
    )
    p.add_argument("--max-queued-requests", type=int, help="The maximum number of queued requests.")
    p.add_argument(
        "--max-total-tokens",
        type=human_readable_int,
        help="The maximum number of tokens in the memory pool.",
    )
    p.add_argument(
        "--chunked-prefill-size",
        type=int,
        help="The maximum number of tokens in a chunk for the chunked prefill.",
    )
    p.add_argument(
        "--max-prefill-tokens",
        type=human_readable_int,
        default=16384,
        help="The maximum number of tokens in a prefill batch.",
    )
    p.add_argument(
        "--schedule-policy",
        type=str,
        default="fcfs",
        choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key"],
        help="The scheduling policy of the requests.",
    )
    p.add_argument(
        "--schedule-conservativeness",
        type=float,
        default=1.0,
        help="How conservative the schedule policy is.",
    )
    p.add_argument("--page-size", type=int, help="The number of tokens in a page.")
    p.add_argument(
        "--disable-radix-cache", action=t, help="Disable RadixAttention for prefix caching."
    )
    p.add_argument("--disable-overlap-schedule", action=t, help="Disable the overlap scheduler.")
    p.add_argument(
        "--enable-mixed-chunk",
        action=t,
        help="Enabling mixing prefill and decode in a batch when using chunked prefill.",
    )
    p.add_argument(
        "--num-continuous-decode-steps",
        type=int,
        default=1,
        help="Run multiple continuous decoding steps to reduce scheduling overhead.",
    )
    # Distributed topology and parallelism
    p.add_argument(
        "--nccl-port",
        type=int,
        help="The port for NCCL distributed environment setup. Defaults to a random port.",
    )
    p.add_argument(
        "--dist-timeout", type=int, help="Set timeout for torch.distributed initialization."
    )
    p.add_argument(
        "--dist-init-addr",
        "--nccl-init-addr",
        type=str,
        help="The host address for initializing distributed backend (e.g., `192.168.0.2:25000`).",
    )
    p.add_argument("--nnodes", type=int, default=1, help="The number of nodes.")
    p.add_argument("--node-rank", type=int, default=0, help="The node rank.")
    p.add_argument(
        "--tp-size",
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="The tensor parallelism size.",
    )
    p.add_argument(
        "--pp-size",
        "--pipeline-parallel-size",
        type=int,
        default=1,
        help="The pipeline parallelism size.",
    )
    p.add_argument(
        "--dp-size", "--data-parallel-size", type=int, default=1, help="The data parallelism size."
    )
    p.add_argument(
        "--ep-size",
        "--expert-parallel-size",
        "--ep",
        type=int,
        default=1,
        help="The expert parallelism size.",
    )
    p.add_argument(
        "--enable-dp-attention",
        action=t,
        help="Enabling data parallelism for attention and tensor parallelism for FFN.",
    )
    p.add_argument("--enable-p2p-check", action=t, help="Enable P2P check for GPU access.")
    p.add_argument(
        "--disable-custom-all-reduce",
        action=t,
        help="Disable the custom all-reduce kernel and fall back to NCCL.",
    )
    p.add_argument(
        "--enable-nccl-nvls",
        action=t,
        help="Enable NCCL NVLS for prefill heavy requests when available.",
    )
    p.add_argument(
        "--enable-symm-mem", action=t, help="Enable NCCL symmetric memory for fast collectives."
    )
    # Device and timeouts
    p.add_argument("--device", type=str, help="The device to use.")
    p.add_argument(
        "--base-gpu-id", type=int, default=0, help="The base GPU ID to start allocating GPUs from."
    )
    p.add_argument(
        "--gpu-id-step",
        type=int,
        default=1,
        help="The delta between consecutive GPU IDs that are used.",
    )
    p.add_argument("--random-seed", type=int, help="The random seed.")
    p.add_argument(
        "--watchdog-timeout",
        type=float,
        default=300,
        help="Set watchdog timeout "
        "in seconds. If a forward batch takes longer than this, the server will crash "
        "to prevent hanging.",
    )
    p.add_argument("--download-dir", type=str, help="Model download directory for huggingface.")
    p.add_argument(
        "--enable-memory-saver",
        action=t,
        help="Allow saving memory using release_memory_occupation and resume_memory_occupation",
    )
    p.add_argument(
        "--delete-ckpt-after-loading",
        action=t,
        help="Delete the model checkpoint after loading the model.",
    )
    # HTTP server
    p.add_argument("--host", type=str, default="127.0.0.1", help="The host of the HTTP server.")
    p.add_argument("--port", type=int, default=30000, help="The port of the HTTP server.")
    p.add_argument("--skip-server-warmup", action=t, help="If set, skip warmup.")
    p.add_argument("--warmups", type=str, help="Specify custom warmup functions (csv).")
    p.add_argument("--ssl-keyfile", type=str, help="The file path to the SSL key file.")
    p.add_argument("--ssl-certfile", type=str, help="The file path to the SSL certificate file.")
    p.add_argument("--ssl-ca-certs", type=str, help="The CA certificates file.")
    p.add_argument(
        "--ssl-keyfile-password", type=str, help="The password to decrypt the SSL keyfile."
    )
    p.add_argument(
        "--enable-ssl-refresh",
        action=t,
        help="Enable automatic SSL certificate hot-reloading when cert/key files change on disk.",
    )
    # API
    p.add_argument(
        "--api-key",
        type=str,
        help="Set API key of the server. It is also used in the OpenAI API compatible server.",
    )
    p.add_argument(
        "--admin-api-key", type=str, help="Set admin API key for sensitive management endpoints."
    )
    p.add_argument(
        "--served-model-name",
        type=str,
        help="Override the model name returned by the v1/models endpoint in OpenAI API server.",
    )
    p.add_argument(
        "--weight-version",
        type=str,
        default="default",
        help="Version identifier for the model weights.",
    )
    p.add_argument(
        "--chat-template",
        type=str,
        help="The buliltin chat template name or the path of the chat template file.",
    )
    p.add_argument(
        "--completion-template",
        type=str,
        help="The buliltin completion template name or the path of the completion template file.",
    )
    p.add_argument(
        "--file-storage-path",
        type=str,
        default="sglang_storage",
        help="The path of the file storage in backend.",
    )
    p.add_argument(
        "--enable-cache-report",
        action=t,
        help="Return number of cached tokens in "
        "usage.prompt_tokens_details for each openai request.",
    )
    p.add_argument(
        "--reasoning-parser",
        type=str,
        choices=["auto", *REASONING_PARSERS],
        help="Specify the parser for reasoning models.",
    )
    p.add_argument(
        "--tool-call-parser",
        type=str,
        choices=["auto", *TOOL_CALL_PARSERS],
        help="Specify the parser for handling tool-call interactions.",
    )
    p.add_argument(
        "--preferred-sampling-params",
        type=json.loads,
        help="json-formatted sampling settings that will be returned in /get_model_info",
    )
    p.add_argument(
        "--allow-auto-truncate",
        action=t,
        help="Allow automatically truncating requests that exceed the maximum input length.",
    )
    p.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        help="The interval (or buffer size) for streaming in terms of the token length.",
    )
    p.add_argument(
        "--stream-response-default-include-usage",
        action=t,
        help="Include usage in every streaming response.",
    )
    # Logging and metrics
    p.add_argument(
        "--log-level", type=str, default="info", help="The logging level of all loggers."
    )
    p.add_argument("--log-level-http", type=str, help="The logging level of HTTP server.")
    p.add_argument(
        "--log-requests", action=t, help="Log metadata, inputs, outputs of all requests."
    )
    p.add_argument(
        "--log-requests-level",
        type=int,
        default=2,
        choices=[0, 1, 2, 3],
        help="The verbosity of --log-requests.",
    )
    p.add_argument("--show-time-cost", action=t, help="Show time cost of custom marks.")
    p.add_argument("--enable-metrics", action=t, help="Enable log prometheus metrics.")
    p.add_argument(
        "--enable-metrics-for-all-schedulers",
        action=t,
        help="Schedulers on all TP ranks record request metrics separately.",
    )
    p.add_argument(
        "--decode-log-interval",
        type=int,
        default=40,
        help="The log and metrics reporting interval (in decode iterations) for decode batches.",
    )
    # Kernel backends and optimisations
    p.add_argument(
        "--attention-backend",
        type=str,
        choices=[
            "triton",
            "torch_native",
            "flex_attention",
            "dsa",
            "nsa",
            "dsv4",
            "compressed",
            "cutlass_mla",
            "fa3",
            "fa4",
            "flashinfer",
            "flashmla",
            "trtllm_mla",
            "cutedsl_mla",
            "tokenspeed_mla",
            "trtllm_mha",
            "dual_chunk_flash_attn",
            "hpc_ops",
            "aiter",
            "wave",
            "intel_amx",
            "ascend",
            "intel_xpu",
        ],
        help="Choose the kernels for attention layers.",
    )
    p.add_argument(
        "--sampling-backend",
        type=str,
        choices=["flashinfer", "pytorch", "ascend"],
        help="Choose the kernels for sampling layers.",
    )
    p.add_argument(
        "--grammar-backend",
        type=str,
        choices=["xgrammar", "outlines", "llguidance", "none"],
        help="Choose the backend for grammar-guided decoding.",
    )
    p.add_argument(
        "--moe-runner-backend",
        type=str,
        default="auto",
        choices=[
            "auto",
            "deep_gemm",
            "triton",
            "triton_kernel",
            "flashinfer_trtllm",
            "experimental_sgl_trtllm",
            "flashinfer_trtllm_routed",
            "flashinfer_cutlass",
            "flashinfer_mxfp4",
            "flashinfer_cutedsl",
            "cutlass",
            "aiter",
            "marlin",
            "humming",
            "experimental_sgl_marlin",
            "hpc_ops",
        ],
        help="Choose the runner backend for MoE.",
    )
    p.add_argument("--speculative-algorithm", type=str, help="Speculative algorithm.")
    # CUDA graphs: the per-phase flags, and the deprecated ones they replace
    # (sglang:srt/server_args.py:1807-1858 and :8316-8336).
    p.add_argument(
        "--cuda-graph-backend-decode",
        type=str,
        choices=CUDA_GRAPH_BACKENDS,
        help="Backend for the decode phase.",
    )
    p.add_argument(
        "--cuda-graph-backend-prefill",
        type=str,
        choices=CUDA_GRAPH_BACKENDS,
        help="Backend for the prefill phase.",
    )
    p.add_argument(
        "--cuda-graph-max-bs-decode",
        type=int,
        help="Maximum batch size captured for the decode cuda graph.",
    )
    p.add_argument(
        "--cuda-graph-max-bs-prefill",
        type=int,
        help="Maximum batch size captured for the prefill cuda graph.",
    )
    p.add_argument(
        "--cuda-graph-bs-decode",
        type=int,
        nargs="+",
        help="Explicit list of batch sizes to capture for the decode cuda graph.",
    )
    p.add_argument(
        "--cuda-graph-bs-prefill",
        type=int,
        nargs="+",
        help="Explicit list of batch sizes to capture for the prefill cuda graph.",
    )
    p.add_argument(
        "--disable-prefill-cuda-graph", action=t, help="Disable the prefill-phase CUDA graph."
    )
    p.add_argument(
        "--disable-decode-cuda-graph", action=t, help="Disable the decode-phase CUDA graph."
    )
    p.add_argument(
        "--disable-cuda-graph-padding", action=t, help="Disable cuda graph when padding is needed."
    )
    p.add_argument(
        "--cuda-graph-max-bs",
        type=int,
        action=DeprecatedAliasStoreAction,
        dest="cuda_graph_max_bs_decode",
        new_flag="--cuda-graph-max-bs-decode",
        help="Deprecated alias for --cuda-graph-max-bs-decode.",
    )
    p.add_argument(
        "--cuda-graph-bs",
        type=int,
        nargs="+",
        action=DeprecatedAliasStoreAction,
        dest="cuda_graph_bs_decode",
        new_flag="--cuda-graph-bs-decode",
        help="Deprecated alias for --cuda-graph-bs-decode.",
    )
    p.add_argument(
        "--disable-cuda-graph",
        action=DeprecatedStoreTrueAction,
        new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
        help="Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead.",
    )
    p.add_argument(
        "--enable-torch-compile",
        action=t,
        help="Optimize the model with torch.compile. Experimental feature.",
    )
    p.add_argument(
        "--torch-compile-max-bs",
        type=int,
        default=32,
        help="Set the maximum batch size when using torch compile.",
    )
    p.add_argument(
        "--triton-attention-num-kv-splits",
        type=int,
        default=8,
        help="The number of KV splits in flash decoding Triton kernel.",
    )
    p.add_argument("--enable-hierarchical-cache", action=t, help="Enable hierarchical cache")
    p.add_argument(
        "--disable-outlines-disk-cache", action=t, help="Disable disk cache of outlines."
    )
    p.add_argument(
        "--enable-deterministic-inference",
        action=t,
        help="Enable deterministic inference mode with batch invariant ops.",
    )
    p.add_argument(
        "--disaggregation-mode",
        type=str,
        default="null",
        choices=["null", "prefill", "decode"],
        help="Only used for PD disaggregation.",
    )
    return p


# Default decode capture sizes (ServerArgs._generate_decode_cuda_graph_batch_sizes,
# sglang:srt/server_args.py:4937) and prefill capture sizes (:4990).
def decode_capture_sizes(max_bs: int) -> list[int]:
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = [bs for bs in sizes if bs <= max_bs]
    return sizes if max_bs in sizes else [*sizes, max_bs]


def prefill_capture_sizes(max_bs: int) -> list[int]:
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [s for s in sizes if s <= max_bs]


def parse_args(argv: list[str]) -> dict[str, Any]:
    """ServerArgs as the release resolves what the stand-in models (argparse exits 2)."""
    ns = vars(build_parser().parse_args(argv))
    # The release's order and defaults; the parsed fields replace theirs in place.
    args = load_release_defaults()
    args.update({name: ns.get(name) for name in FIELDS})
    args["disable_cuda_graph"] = bool(ns.get("disable_cuda_graph"))
    # ServerArgs.__post_init__ (sglang:srt/server_args.py): the tokenizer is the
    # model's, the served name the model path, a random seed, the device.
    args["tokenizer_path"] = args["tokenizer_path"] or args["model_path"]
    args["served_model_name"] = args["served_model_name"] or args["model_path"]
    if args["random_seed"] is None:
        args["random_seed"] = int.from_bytes(os.urandom(4), "big") >> 2
    args["device"] = args["device"] or "cuda"
    # _handle_gpu_memory_settings for a GPU with 90-160 GB (a GB10 reports
    # about 120 GB): chunked prefill 8k, decode graphs up to 256 (TP < 4) or
    # 512 requests (sglang:srt/server_args.py:4672-4680).
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = 8192
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = 0.8
    return args


def check_args(args: dict[str, Any]) -> None:
    """ServerArgs.check_server_args: the assertion on the topology (server_args.py:8701)."""
    if (args["tp_size"] * args["pp_size"]) % args["nnodes"]:
        raise AssertionError(release.TP_NODES())


def server_args_repr(args: dict[str, Any]) -> str:
    """The dataclass repr the release logs: every field as repr(), keys included, in clear
    (``args`` as parse_args gives it: every field, in the dataclass's order)."""
    return "ServerArgs(" + ", ".join(f"{name}={value!r}" for name, value in args.items()) + ")"
