"""The Helm chart (`chart/`), generated from `config/` by `make chart` (`python -m llmaz_dev.chartgen`).

One source of truth: the chart is made of what `kustomize build` makes of `config/default` (plus the optional
`config/gateway` and `config/prometheus`), with the fields users set through values turned into template text.
Nothing under `chart/` is written by hand; a unit test fails when the committed chart differs from what the
generator renders, and a golden test compares `helm template` with `kustomize build` object by object.

- `sources`: running kustomize, reading the project's version and the LeaderWorkerSet release;
- `objects`: the built objects the chart configures, and the defaults read from them;
- `values`: the values, described once: values.yaml, values.schema.json and the README's table;
- `templating`: objects to template text (tokens replaced after dumping);
- `manifests`: which fields become which values, and the template files;
- `text`: Chart.yaml, helpers, checks, NOTES.txt and the README's prose;
- `chart`: the whole chart, and writing it.
"""

from __future__ import annotations

from llmaz_dev.chartgen.chart import render_chart, write_chart
from llmaz_dev.chartgen.sources import SourceError, Sources, read_sources

__all__ = ["SourceError", "Sources", "read_sources", "render_chart", "write_chart"]
