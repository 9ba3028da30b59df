"""``logstrand kafka serve``: a Kafka front of its own, outside the nodes."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import UrlOption, duration_option, fail, require_url, serve_until_signalled
from ._node_setup import host_port

kafka_app = typer.Typer(help="Serve the Kafka protocol (docs/kafka.md).", no_args_is_help=True)


_Port = Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")]
_Host = Annotated[
    str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only).")
]
_Advertise = Annotated[
    str | None,
    typer.Option(help="HOST:PORT Kafka clients are told (default: --host and the port)."),
]
_BrokerId = Annotated[int, typer.Option("--broker-id", min=0, help="The broker id clients see.")]
_AutoCreate = Annotated[
    bool,
    typer.Option(
        "--auto-create", help="Create a topic when a client asks for one that does not exist."
    ),
]
_NumPartitions = Annotated[
    int,
    typer.Option(
        "--num-partitions",
        min=1,
        max=10_000,
        help="Partitions of a topic made without a number (Kafka's num.partitions): by "
        "--auto-create, or by CreateTopics with -1.",
    ),
]
_GroupSessionMs = Annotated[
    int,
    typer.Option(
        "--group-session-ms",
        min=1_000,
        max=1_800_000,
        help="Session timeout of consumer-protocol group members (group.protocol=consumer).",
    ),
]
_Transactions = Annotated[
    bool,
    typer.Option(
        "--transactions",
        help="Serve Kafka transactions (docs/transactions.md); run one such front for "
        "the cluster: this front coordinates every transactional id.",
    ),
]
_MaxTransactionTimeout = Annotated[
    str,
    typer.Option(help="The longest transaction.timeout.ms a producer may ask for."),
]


@kafka_app.command("serve")
def serve(
    port: _Port,
    url: UrlOption = None,
    host: _Host = "127.0.0.1",
    advertise: _Advertise = None,
    broker_id: _BrokerId = 0,
    auto_create: _AutoCreate = False,
    num_partitions: _NumPartitions = 1,
    group_session_ms: _GroupSessionMs = 45_000,
    transactions: _Transactions = False,
    max_transaction_timeout: _MaxTransactionTimeout = "15min",
) -> None:
    """Serve the Kafka protocol for the cluster at --url until SIGINT/SIGTERM:
    one broker that answers for every topic, through the client library, with
    the credentials of --token/--ca (or LOGSTRAND_TOKEN/LOGSTRAND_CA).  Prints
    'kafka bootstrap HOST:PORT' once it listens."""
    import trio

    from ..kafka import run_front
    from ..security import credentials_from_env

    told = host_port(advertise, "--advertise")
    max_txn_ms = duration_option(max_transaction_timeout, "--max-transaction-timeout")
    if not max_txn_ms or max_txn_ms > 3_600_000:
        fail("--max-transaction-timeout: more than 0 and at most 1h")
    cluster = require_url(url)
    credentials = credentials_from_env()

    async def front(task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        await run_front(
            cluster,
            host,
            port,
            advertise=told,
            broker_id=broker_id,
            auto_create=auto_create,
            num_partitions=num_partitions,
            group_session_ms=group_session_ms,
            transactions=transactions,
            max_transaction_timeout_ms=max_txn_ms,
            credentials=credentials,
            task_status=task_status,
        )

    serve_until_signalled(front, host, port, lambda at: f"kafka bootstrap {at[0]}:{at[1]}")
