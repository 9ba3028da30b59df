"""The Kafka front: Kafka's wire protocol served on top of logstrand.

Kafka producers, consumers and tools (librdkafka, kafka-python, kcat) talk
to a front as to a Kafka broker.  A node serves one with ``--kafka-port``;
``logstrand kafka serve`` runs one alone.  docs/kafka.md has the mapping of
topics, partitions and offsets, and the APIs served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._front import KafkaFront
    from ._run import run_front
    from ._server import Limits, serve_kafka

__all__ = ["KafkaFront", "Limits", "run_front", "serve_kafka"]

#: Loaded when first asked for: the CLI reaches ``groups._model`` (group
#: descriptions) and must not pay for the whole front at every start.
_WHERE = {
    "KafkaFront": "_front",
    "run_front": "_run",
    "Limits": "_server",
    "serve_kafka": "_server",
}


__getattr__ = lazy_names(__name__, _WHERE)
