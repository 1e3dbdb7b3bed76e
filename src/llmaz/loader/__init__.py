"""The model loader: the `model-loader` init container that puts a model's weights where the engine expects them.

Tour, in the order a load runs:
- `config`: the environment contract (set by the controller) parsed into a source, a target and tuning; the
  target comes from `llmaz.apis.modelpath`, the rule the controller uses to point the engine at the weights.
- `load`: skips a target whose completion marker (`marker`) matches; otherwise lists the source and downloads.
- `transfer`: resumable parallel file downloads into `<file>.partial`, shared by every byte-range source:
  `huggingface` (Hub API) and `objstore` over the `oss` and `s3` (S3 and GCS) clients. `modelscope` delegates to
  its library.
- `retry` (bounded backoff for transient failures), `progress` (periodic progress lines), `log` (JSON lines),
  `errors` (failure classes and the exit codes of `__main__`).

This package imports nothing from llmaz but `llmaz.apis.constants` and `llmaz.apis.modelpath`.
"""
