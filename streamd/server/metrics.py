"""Prometheus metrics of one server instance (``GET /metrics``).

Each :class:`Metrics` owns a dedicated ``CollectorRegistry``, so several
servers in one process (tests) never share or collide on series.  All names
start with ``streamd_``; docs/protocol.md lists them.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "CONTENT_TYPE"]

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Counters, gauges and histograms updated by the I/O layer (event-loop thread)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._children: dict[tuple[Any, str], Any] = {}  # (metric, label) -> its child (:meth:`child`)
        self.active_streams = Gauge("streamd_active_streams", "Live recognition streams (v1, vosk, mic)",
                                    registry=r)
        self.connections = Counter("streamd_connections", "Websocket connections accepted, by route",
                                   ["route"], registry=r)
        self.audio_seconds = Counter("streamd_audio_seconds", "Seconds of audio accepted into streams",
                                     registry=r)
        self.rtf = Gauge("streamd_real_time_factor",
                         "Compute seconds per second of audio decoded, last batch step", registry=r)
        self.batch_size = Histogram("streamd_batch_size", "Streams per batch step",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=r)
        self.step_seconds = Histogram("streamd_step_seconds", "Wall time of one batch step",
                                      buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
                                      registry=r)
        self.wake_events = Counter("streamd_wake_events", "Wake-word detections", ["keyword"], registry=r)
        self.wake_suppressed = Counter("streamd_wake_suppressed", "Wake-model firings held back by the refractory "
                                       "window after a detection (not sent as events)", ["keyword"], registry=r)
        self.wake_verifications = Counter("streamd_wake_verifications",
                                          "Wake-model detections the second pass was asked to verify (engine.kws."
                                          "verify), by keyword and outcome (verified, rejected, skipped_overload, "
                                          "failed, unverified; only verified, skipped_overload and failed are sent)",
                                          ["keyword", "outcome"], registry=r)
        self.errors = Counter("streamd_errors", "Error events sent to clients, by code", ["code"], registry=r)
        self.backlog = Histogram("streamd_backlog_seconds",
                                 "Audio accepted but not yet decoded when a partial was made, by stream class "
                                 "(v1, vosk, mic): grows when the server falls behind",
                                 ["stream_class"], buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
                                 registry=r)
        self.partial_lag = Histogram("streamd_partial_lag_seconds",
                                     "From the daemon reading the audio that completed a chunk to that chunk's "
                                     "partial leaving the engine, by engine lane (main, light)",
                                     ["lane"], buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                                      10.0, 30.0),
                                     registry=r)
        self.load = Gauge("streamd_load", "Predicted wall time of one batch step over every live stream, as a share "
                                          "of a chunk's duration (new streams are refused above limits.max_load)",
                          registry=r)
        self.light_lane = Gauge("streamd_light_lane_streams", "Streams decoding in the light lane's engine process "
                                "(limits.light_lane); -1 while the lane is down", registry=r)
        self.flow_held = Counter("streamd_flow_held_seconds",
                                 "Seconds connections were not read because their audio waited to be decoded "
                                 "(flow control: clients sending faster than the engine decodes), by stream class",
                                 ["stream_class"], registry=r)
        self.dropped_partials = Counter("streamd_dropped_partials",
                                        "Partials replaced by a newer one before a slow client read them",
                                        registry=r)
        self.second_pass = Counter("streamd_second_pass_finals",
                                   "Finals of streams with a second pass, by outcome (done, first_pass_preferred, "
                                   "skipped_overload, skipped_too_long, skipped_no_speech, failed)", ["outcome"],
                                   registry=r)
        self.second_pass_seconds = Histogram("streamd_second_pass_seconds",
                                             "From a segment's final (engine) to its second-pass final",
                                             buckets=(0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0),
                                             registry=r)

        self.front_processes = Gauge("streamd_front_processes", "Front processes carrying the connections now "
                                     "(server.front_processes > 1; 0: the connections are in the daemon's process)",
                                     registry=r)
        self.front_exits = Counter("streamd_front_process_exits", "Front processes that exited while the daemon "
                                   "was not stopping (each one replaced; its connections were lost)", registry=r)

    def child(self, metric: Any, label: str) -> Any:
        """``metric.labels(label)`` of a metric with one label, looked up once (the client library's lookup takes
        a lock and checks the label every time: this is for the metrics updated per partial)."""
        c = self._children.get((metric, label))
        if c is None:
            c = self._children[(metric, label)] = metric.labels(label)
        return c

    def record_step(self, batch: int, seconds: float, audio_seconds: float) -> None:
        self.batch_size.observe(batch)
        self.step_seconds.observe(seconds)
        if audio_seconds > 0:
            self.rtf.set(seconds / audio_seconds)

    def render(self) -> bytes:
        """Prometheus text exposition format."""
        return generate_latest(self.registry)
