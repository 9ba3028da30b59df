"""``logstrand node``'s Kafka options, and the front they make
(``kafka._node_front``): the port and address, the listener's bounds, topics
made on demand, and transactions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ._common import duration_option, fail, keyword
from ._node_setup import host_port

if TYPE_CHECKING:
    from ..groups import NodeGroups

#: The Kafka options of ``node``, in its signature's order.
KAFKA_OPTIONS = (
    keyword(
        "kafka_port",
        int | None,
        None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve the Kafka protocol on this port too (on the host the node "
            "listens on), for Kafka clients and tools (docs/kafka.md).",
        ),
    ),
    keyword(
        "kafka_advertise",
        str | None,
        None,
        typer.Option(
            help="HOST:PORT Kafka clients are told (default: the node's host and --kafka-port)."
        ),
    ),
    keyword(
        "kafka_budget",
        str,
        "256MiB",
        typer.Option(
            help="Bytes of Kafka requests the front holds, over all its connections, "
            "counted as they arrive: past it, reading waits (docs/security.md).",
        ),
    ),
    keyword(
        "kafka_decode_budget",
        str,
        "128MiB",
        typer.Option(
            help="What the Kafka requests in hand may have been decoded into, at 512 "
            "bytes an array item and a record's bytes plus 96: past it, a request "
            "waits to be decoded (docs/security.md).",
        ),
    ),
    keyword(
        "kafka_auto_create",
        bool,
        False,
        typer.Option(
            "--kafka-auto-create",
            help="Create a topic (--kafka-num-partitions partitions) when a Kafka client "
            "asks for one that does not exist.",
        ),
    ),
    keyword(
        "kafka_num_partitions",
        int,
        1,
        typer.Option(
            min=1,
            max=10_000,
            help="Partitions of a topic the Kafka front makes without being told how many "
            "(Kafka's num.partitions): by --kafka-auto-create, or by CreateTopics with -1.",
        ),
    ),
    keyword(
        "kafka_transactions",
        bool,
        False,
        typer.Option(
            "--kafka-transactions",
            help="Serve Kafka transactions (transactional.id): the coordinator, "
            "fencing, timeouts, offsets committed with a transaction, markers in the "
            "logs and read_committed fetches (docs/transactions.md). In secure mode a "
            "user needs write on the transactional id (logstrand acl grant "
            "--transactional-id).",
        ),
    ),
    keyword(
        "kafka_max_transaction_timeout",
        str,
        "15min",
        typer.Option(
            help="The longest transaction timeout a producer may ask for (Kafka's "
            "transaction.max.timeout.ms), Kafka's and logstrand's own alike; a longer "
            "one is refused when the producer starts.",
        ),
    ),
    keyword(
        "transactional_id_expiry",
        str,
        "7d",
        typer.Option(
            help="A transactional id with no transaction open whose producer sent nothing "
            "this long is forgotten and its state removed (Kafka's "
            "transactional.id.expiration.ms); its next producer starts afresh.",
        ),
    ),
)


def max_transaction_timeout_ms(params: dict[str, Any]) -> int:
    """--kafka-max-transaction-timeout, checked (for every producer the node
    coordinates: Kafka's and the native client's)."""
    max_txn_ms = duration_option(
        params["kafka_max_transaction_timeout"], "--kafka-max-transaction-timeout"
    )
    if not max_txn_ms or max_txn_ms > 3_600_000:
        fail("--kafka-max-transaction-timeout: more than 0 and at most 1h")
    return max_txn_ms


def transactional_id_expiry_ms(params: dict[str, Any]) -> int:
    """--transactional-id-expiry, checked."""
    ms = duration_option(params["transactional_id_expiry"], "--transactional-id-expiry")
    if not ms or ms < 1000:
        fail("--transactional-id-expiry: at least 1s")
    return ms


def kafka_front(params: dict[str, Any], groups: NodeGroups) -> Any:
    """The node's Kafka front (None without --kafka-port)."""
    port = params["kafka_port"]
    if port is None:
        # Said rather than ignored: a node told how to serve Kafka but not
        # where would start without a front.
        if (
            params["kafka_advertise"] is not None
            or params["kafka_auto_create"]
            or params["kafka_num_partitions"] != 1
            or params["kafka_transactions"]
        ):
            fail(
                "--kafka-advertise, --kafka-auto-create, --kafka-num-partitions and "
                "--kafka-transactions need --kafka-port"
            )
        return None
    max_txn_ms = max_transaction_timeout_ms(params)
    if params["kafka_advertise"] is not None:
        host_port(params["kafka_advertise"], "--kafka-advertise")
    from ..kafka import Limits
    from ..kafka._node_front import NodeKafkaFront, NodeKafkaOptions

    limits = Limits(
        budget_bytes=_size(params["kafka_budget"], "--kafka-budget"),
        decoded_bytes=_size(params["kafka_decode_budget"], "--kafka-decode-budget"),
    )
    return NodeKafkaFront(
        NodeKafkaOptions(
            port,
            params["kafka_advertise"],
            params["kafka_auto_create"],
            limits,
            num_partitions=params["kafka_num_partitions"],
            transactions=params["kafka_transactions"],
            max_transaction_timeout_ms=max_txn_ms,
        ),
        groups,
    )


def _size(text: str, flag: str) -> int:
    from .._units import parse_size

    try:
        size = parse_size(text)
    except ValueError as exc:
        fail(f"{flag}: {exc}")
    if size < 1024 * 1024:
        fail(f"{flag}: at least 1MiB, not {text}")
    return size
