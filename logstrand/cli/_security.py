"""``logstrand users`` and ``logstrand acl``: principals and their grants.

These write the epoch store directly (as ``logs`` and ``nodes`` do): whoever
runs them needs write access to it (with ZooKeeper, its digest credentials;
see docs/security.md).  Nodes pick changes up within seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..epochstore._model import check_range_name
from ..records import LOG_ID_MAX, POSITIONS_LOGS
from ..security import (
    check_name,
    hash_token,
    new_token,
    parse_group_ops,
    parse_group_pattern,
    parse_log_range,
    parse_ops,
    parse_txn_ops,
    parse_txn_pattern,
    scram_credentials,
)
from ._common import (
    EXIT_USAGE,
    JsonOption,
    UrlOption,
    console,
    fail,
    open_store,
    parse_node_id,
    print_json,
)

if TYPE_CHECKING:
    from ..epochstore import EpochStore
    from ..security._certs import LocalCA

users_app = typer.Typer(
    help="Users (principals) that clients authenticate as.", no_args_is_help=True
)
acl_app = typer.Typer(
    help="What each user may do, per log and per consumer group.", no_args_is_help=True
)

LogsOption = Annotated[
    str | None,
    typer.Option(
        "--logs",
        help="Logs: N, FIRST..LAST, all (every log, the internal ones too) or positions "
        "(consumer groups' positions: grant read,append on it to a consumer).",
        show_default=False,
    ),
]
GroupOption = Annotated[
    str | None,
    typer.Option(
        "--group",
        help="A consumer group instead of logs: NAME, PREFIX* (every group whose name "
        "starts so) or * (every group); operations read,describe,delete.",
        show_default=False,
    ),
]
TopicOption = Annotated[
    str | None,
    typer.Option(
        "--topic",
        help="Logs by the name of their range (a Kafka topic): NAME or PREFIX*; it covers "
        "the topic's logs as it grows, and a topic made later.",
        show_default=False,
    ),
]
TxnOption = Annotated[
    str | None,
    typer.Option(
        "--transactional-id",
        help="Transactional ids instead of logs: ID, PREFIX* or *; operations write "
        "(run the id's transactions) and describe.",
        show_default=False,
    ),
]
OpsOption = Annotated[
    str,
    typer.Option(
        "--ops",
        help="Operations: read,append,trim,admin or all on logs; read,describe,delete or "
        "all on a group; write,describe or all on a transactional id.",
        show_default=False,
    ),
]


_CREDENTIALS_ENV = ("LOGSTRAND_CA", "LOGSTRAND_TOKEN", "LOGSTRAND_TOKEN_FILE", "LOGSTRAND_CERT")


def open_security_store(url: str | None) -> EpochStore:
    """The epoch store whose users and grants a command changes, refused when
    the shell's TLS credentials say the user means a secure cluster and the
    store's nodes speak no TLS: users and grants would land, unused, in the
    wrong cluster (an earlier `export LOGSTRAND_URL` of an insecure one)."""
    import os

    from ..net import speaks_tls

    store = open_store(url)
    set_vars = [name for name in _CREDENTIALS_ENV if os.environ.get(name)]
    if not set_vars:
        return store
    nodes = store.nodes()
    for node_id in sorted(store.alive_nodes()):
        if node_id not in nodes:
            continue
        host, _, port = nodes[node_id].address.rpartition(":")
        tls = speaks_tls(host, int(port))
        if tls is None:
            continue  # not reachable from here: ask the next one
        if not tls:
            store.close()
            where = url or os.environ.get("LOGSTRAND_URL")
            fail(
                f"{where} is a cluster without TLS (node {node_id} speaks none), but "
                f"{' and '.join(set_vars)} {'is' if len(set_vars) == 1 else 'are'} set, as for "
                "a secure one: is LOGSTRAND_URL (or --url) the cluster you mean? Users and "
                "grants are not checked without TLS; unset those to change them anyway",
                EXIT_USAGE,
            )
        break
    return store


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a user and print its token, once (only its hash is kept)."""
    check_name(name)
    token = new_token()
    with open_security_store(url) as store:
        store.add_user(name, hash_token(token), scram_credentials(token))
    if as_json:
        print_json({"user": name, "token": token})
    else:
        print(token)


@users_app.command("remove")
def users_remove(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    url: UrlOption = None,
) -> None:
    """Remove a user and its grants (its connections are refused from the next one on)."""
    with open_security_store(url) as store:
        store.remove_user(check_name(name))
    console.print(f"removed user {name}")


@users_app.command("list")
def users_list(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """The users, with when each was created."""
    with open_security_store(url) as store:
        users = store.security()["users"]
    if as_json:
        print_json([{"user": n, "created_ms": u["created_ms"]} for n, u in sorted(users.items())])
        return
    table = Table("user", "created (ms since epoch)")
    for name, user in sorted(users.items()):
        table.add_row(name, str(user["created_ms"]))
    console.print(table)


def _logs_text(first: int, last: int) -> str:
    if (first, last) == (1, LOG_ID_MAX):
        return "all"
    if (first, last) == (POSITIONS_LOGS[0], POSITIONS_LOGS[-1]):
        return "positions"
    return str(first) if first == last else f"{first}..{last}"


def _grant_args(
    name: str,
    logs: str | None,
    group: str | None,
    topic: str | None,
    ops: str,
    txn: str | None = None,
) -> tuple[str, tuple[int, int] | tuple[str, str], frozenset[str]]:
    """(user, logs (first, last) or ("group", "topic" or "transactional id",
    a pattern), operations)."""
    if sum(x is not None for x in (logs, group, topic, txn)) != 1:
        fail("give one of --logs, --topic, --group or --transactional-id")
    if txn is not None:
        return check_name(name), ("transactional id", parse_txn_pattern(txn)), parse_txn_ops(ops)
    if group is not None:
        return check_name(name), ("group", parse_group_pattern(group)), parse_group_ops(ops)
    if topic is not None:
        check_range_name(topic[:-1] if topic.endswith("*") else topic)
        return check_name(name), ("topic", topic), parse_ops(ops)
    assert logs is not None
    return check_name(name), parse_log_range(logs), parse_ops(ops)


def _what(on: tuple[int, int] | tuple[str, str]) -> str:
    return f"{on[0]} {on[1]}" if isinstance(on[0], str) else f"logs {_logs_text(*on)}"


@acl_app.command("grant")
def acl_grant(
    name: Annotated[str, typer.Argument(help="The user.")],
    ops: OpsOption,
    logs: LogsOption = None,
    group: GroupOption = None,
    topic: TopicOption = None,
    txn: TxnOption = None,
    url: UrlOption = None,
) -> None:
    """Let a user do OPS on LOGS, on the logs of --topic, on the consumer
    groups --group names, or with the transactional ids --transactional-id
    names."""
    name, on, op_set = _grant_args(name, logs, group, topic, ops, txn)
    with open_security_store(url) as store:
        if on[0] == "transactional id":
            store.grant_txn(name, str(on[1]), op_set)
        elif on[0] == "group":
            store.grant_group(name, str(on[1]), op_set)
        elif on[0] == "topic":
            store.grant_topic(name, str(on[1]), op_set)
        else:
            store.grant(name, int(on[0]), int(on[1]), op_set)
    console.print(f"{name} may {','.join(sorted(op_set))} on {_what(on)}", highlight=False)


@acl_app.command("revoke")
def acl_revoke(
    name: Annotated[str, typer.Argument(help="The user.")],
    ops: OpsOption,
    logs: LogsOption = None,
    group: GroupOption = None,
    topic: TopicOption = None,
    txn: TxnOption = None,
    url: UrlOption = None,
) -> None:
    """Take OPS on LOGS (parts of wider grants stay), or on --topic, --group
    or --transactional-id as it was granted, away from a user."""
    name, on, op_set = _grant_args(name, logs, group, topic, ops, txn)
    with open_security_store(url) as store:
        if on[0] == "transactional id":
            changed = store.revoke_txn(name, str(on[1]), op_set)
        elif on[0] == "group":
            changed = store.revoke_group(name, str(on[1]), op_set)
        elif on[0] == "topic":
            changed = store.revoke_topic(name, str(on[1]), op_set)
        else:
            changed = store.revoke(name, int(on[0]), int(on[1]), op_set)
    console.print(f"{changed} grant(s) of {name} changed")


@acl_app.command("list")
def acl_list(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Every grant, on logs, on topics, on groups and on transactional ids."""
    with open_security_store(url) as store:
        doc = store.security()
    if as_json:
        print_json(doc["grants"] + doc["topic_grants"] + doc["group_grants"] + doc["txn_grants"])
        return
    table = Table("user", "logs, topic, group or transactional id", "operations")
    for g in doc["grants"]:
        table.add_row(g["user"], _logs_text(g["first"], g["last"]), ",".join(g["ops"]))
    for g in doc["topic_grants"]:
        table.add_row(g["user"], f"topic {g['topic']}", ",".join(g["ops"]))
    for g in doc["group_grants"]:
        table.add_row(g["user"], f"group {g['group']}", ",".join(g["ops"]))
    for g in doc["txn_grants"]:
        table.add_row(g["user"], f"transactional id {g['transactional_id']}", ",".join(g["ops"]))
    console.print(table)


tls_app = typer.Typer(
    help="A small CA for a cluster's TLS: node and client certificates (docs/deploy.md).",
    no_args_is_help=True,
)
DirArgument = Annotated[
    Path, typer.Argument(help="The CA's directory (ca.pem, ca.key; made if missing).")
]


def _ca(directory: Path) -> LocalCA:
    from ..security._certs import LocalCA

    try:
        return LocalCA(str(directory))
    except (OSError, ValueError) as exc:
        fail(f"{directory}: {exc}")


@tls_app.command("ca")
def tls_ca(directory: DirArgument) -> None:
    """Make the CA in DIR (or keep the one there) and print its certificate's path."""
    console.print(_ca(directory).ca_path, highlight=False)


@tls_app.command("node")
def tls_node(
    directory: DirArgument,
    node_id: Annotated[int, typer.Option("--id", help="The node's id.", parser=parse_node_id)],
    hosts: Annotated[
        list[str],
        typer.Option(
            "--host",
            help="A name or address clients and nodes reach it by (repeat for more): "
            "its advertised host.",
        ),
    ],
) -> None:
    """Issue a node's certificate and key (DIR/nodeN.pem, DIR/nodeN.key)."""
    cert, key = _ca(directory).node(node_id, hosts)
    console.print(f"{cert}\n{key}", highlight=False)


@tls_app.command("user")
def tls_user(
    directory: DirArgument,
    name: Annotated[str, typer.Option("--name", help="The user the certificate names.")],
) -> None:
    """Issue a client certificate for a user (DIR/user-NAME.pem and .key)."""
    check_name(name)
    cert, key = _ca(directory).user(name)
    console.print(f"{cert}\n{key}", highlight=False)
