"""Metrics pages as the engines serve them, with the load values a test picks (shape and names as each engine
writes them: HELP and TYPE lines, counters, histograms with their buckets, labels)."""

from __future__ import annotations

LLAMACPP_PROPS = b"""{"default_generation_settings": {"n_ctx": 512, "params": {"temperature": 0.8}},
"total_slots": %d, "model_path": "/workspace/models/models--tiny/model.gguf", "chat_template": "",
"build_info": "b1-unknown"}"""


def llamacpp_props(total_slots: int) -> bytes:
    return LLAMACPP_PROPS % total_slots


def llamacpp(processing: int, deferred: int, predicted: int = 4510) -> str:
    return f"""\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1208
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 3.231
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted}
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 163.9
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 4602
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode counter
llamacpp:n_busy_slots_per_decode 1.37
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 373.869
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 27.516
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {processing}
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred {deferred}
"""


def _histogram(name: str, labels: str, bounds: tuple[str, ...]) -> str:
    lines = [f"# HELP {name} Histogram of {name.split(':')[1]}.", f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{le}",{labels}}} {i * 3}.0' for i, le in enumerate(bounds)]
    lines += [f"{name}_count{{{labels}}} 57.0", f"{name}_sum{{{labels}}} 12.5"]
    return "\n".join(lines) + "\n"


_LATENCY = ("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf")


def vllm(
    running: tuple[int, ...],
    waiting: tuple[int, ...],
    kv_usage: tuple[float, ...],
    *,
    model: str = "qwen2-0.5b",
    kv_metric: str = "vllm:kv_cache_usage_perc",
) -> str:
    """A vLLM page with one label set per data-parallel engine (label `engine`, as vLLM's V1 engine writes)."""
    labels = [f'engine="{i}",model_name="{model}"' for i in range(len(running))]
    gauges = ""
    for name, values in (
        ("vllm:num_requests_running", running),
        ("vllm:num_requests_waiting", waiting),
        (kv_metric, kv_usage),
    ):
        gauges += f"# HELP {name} Number of requests / KV-cache usage.\n# TYPE {name} gauge\n"
        gauges += "".join(f"{name}{{{label}}} {value}\n" for label, value in zip(labels, values, strict=True))
    return f"""\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{{generation="0"}} 12963.0
python_gc_objects_collected_total{{generation="1"}} 4121.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.153328e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="3741"}} 1.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""}} 1.7323e+09
{gauges}\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="{model}"}} 8112.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="{model}"}} 0.0
{_histogram("vllm:time_to_first_token_seconds", f'engine="0",model_name="{model}"', _LATENCY)}\
{_histogram("vllm:e2e_request_latency_seconds", f'engine="0",model_name="{model}"', _LATENCY)}\
{_histogram("vllm:request_queue_time_seconds", f'engine="0",model_name="{model}"', _LATENCY)}\
"""


def sglang(running: int, queued: int, token_usage: float, *, model: str = "meta-llama/Llama-3.1-8B-Instruct") -> str:
    labels = f'model_name="{model}"'
    return f"""\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{{labels}}} 8128902.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{{labels}}} 7557572.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{labels}}} {running}.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{{{labels}}} 123859.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{{{labels}}} {token_usage}
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{{labels}}} 86.50814177726902
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{{labels}}} {queued}.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{{labels}}} 0.007507552643049313
{_histogram("sglang:time_to_first_token_seconds", labels, _LATENCY)}\
"""


def tgi(batch_size: int, queue_size: int) -> str:
    buckets = "".join(f'tgi_request_duration_bucket{{le="{le}"}} {i}\n' for i, le in enumerate(_LATENCY))
    return f"""\
# TYPE tgi_request_count counter
tgi_request_count 312
# TYPE tgi_request_success counter
tgi_request_success 309
# TYPE tgi_batch_inference_count counter
tgi_batch_inference_count{{method="prefill"}} 318
tgi_batch_inference_count{{method="decode"}} 10042
# TYPE tgi_queue_size gauge
tgi_queue_size {queue_size}
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size {batch_size}
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 2048
# TYPE tgi_request_duration histogram
{buckets}\
tgi_request_duration_sum 1203.4
tgi_request_duration_count 312
"""
