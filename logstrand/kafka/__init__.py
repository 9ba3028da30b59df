"""The Kafka front: Kafka's wire protocol served on top of logstrand.

Kafka producers, consumers and tools (librdkafka, kafka-python, kcat) talk
to a front as to a Kafka broker.  A node serves one with ``--kafka-port``;
``logstrand kafka serve`` runs one alone.  docs/kafka.md has the mapping of
topics, partitions and offsets, and the APIs served.
"""

from __future__ import annotations

from ._front import KafkaFront
from ._run import run_front
from ._server import Limits, serve_kafka

__all__ = ["KafkaFront", "Limits", "run_front", "serve_kafka"]
