"""The OpenTelemetry SDK configured for one test: an in-memory span exporter and
metric reader set as the global providers, and the globals put back after (the
API lets a process set them once; the SDK's own test utilities reset them the
same way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


class OpenSpans(SpanProcessor):
    """Counts spans started and not yet ended: none may be left open."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: Any) -> None:
        self.open.pop(span.context.span_id, None)


def _reset() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._PROXY_METER_PROVIDER = metrics_internal._ProxyMeterProvider()


@contextmanager
def otel_sdk(with_metrics: bool = True) -> Iterator[tuple[InMemorySpanExporter, Any, OpenSpans]]:
    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader() if with_metrics else None
    opened = OpenSpans()
    provider = TracerProvider()
    provider.add_span_processor(opened)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset()
    trace.set_tracer_provider(provider)
    if reader is not None:
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    try:
        yield exporter, reader, opened
    finally:
        provider.shutdown()
        _reset()


def tree(spans: Any) -> dict[str, list[str]]:
    """Each span's name -> the names of its children, in start order."""
    by_id = {s.context.span_id: s for s in spans}
    out: dict[str, list[str]] = {s.name: [] for s in spans}
    for s in sorted(spans, key=lambda s: s.start_time):
        if s.parent is not None and s.parent.span_id in by_id:
            out[by_id[s.parent.span_id].name].append(s.name)
    return out


def metric_points(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points
