"""The handshake: ``connect`` (the side that dials) and
``serve_connection`` (a server's side), and a blocking check for launchers.

The side that connected sends ``Hello`` (the protocol versions it speaks,
the cluster, its node id when it is a node, a token); the server answers
``HelloAck`` with the highest common version, or refuses (another cluster,
no common version, bad credentials).  Until ``Hello`` is accepted a server
reads one small frame of few items, within ``handshake_s``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from typing import TYPE_CHECKING, Any

import trio

from ..errors import NotAuthenticatedError, ProtocolError, Status, TransientError
from ..security import peer_identity
from ..wire import (
    FRAME_BYTES_MAX_DEFAULT,
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    FrameDecoder,
    Hello,
    HelloAck,
    choose_version,
    decode_body,
    encode_frame,
)
from ._conn import (
    DEFAULT_LIMITS,
    HANDSHAKE_TIMEOUT_S,
    Connection,
    ConnLimits,
    SendBudget,
    close_stream,
)
from ._tls import TlsStream

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..security import Credentials


def _tcp(stream: trio.SocketStream) -> None:
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def connect(
    host: str,
    port: int,
    *,
    cluster: str,
    node_id: int | None = None,
    credentials: Credentials | None = None,
    limits: ConnLimits = DEFAULT_LIMITS,
) -> Connection:
    """Open a connection and do the handshake (within ``HANDSHAKE_TIMEOUT_S``).

    Raises:
        TransientError: CONNFAILED when the peer cannot be reached or refuses us.
        NotAuthenticatedError (an AccessDeniedError): the node did not accept our
            credentials.
    """
    tcp: trio.SocketStream | None = None
    done = False
    ctx = credentials.ssl if credentials is not None else None
    token = credentials.token if credentials is not None else None
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            tcp = await trio.open_tcp_stream(host, port)
            _tcp(tcp)
            stream: trio.abc.Stream = tcp
            if ctx is not None:
                tls = TlsStream(tcp, ctx, server_side=False, server_hostname=host)
                await tls.do_handshake()
                stream = tls
            # Replies can be large (a directory, a digest): the full item budget.
            conn = Connection(stream, peer=f"{host}:{port}", limits=limits)
            hello = Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster, node_id, token)
            await stream.send_all(encode_frame(hello))
            ack = await conn.receive_one()
            done = True
    except (
        OSError,
        ssl.SSLError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        ProtocolError,
        TransientError,
    ) as exc:
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
        if isinstance(cause, ssl.SSLError) and cause.reason == "WRONG_VERSION_NUMBER":
            # Plain bytes where a TLS handshake was expected.
            raise NotAuthenticatedError(
                f"{host}:{port} does not speak TLS (a cluster without security): "
                "connect without a CA certificate (--ca, LOGSTRAND_CA)"
            ) from None
        raise TransientError(f"cannot connect to {host}:{port}: {exc}", Status.CONNFAILED) from None
    finally:
        # Failed, timed out or cancelled half-way: never leak the socket.
        if not done and tcp is not None:
            tcp.socket.close()
    if not isinstance(ack, HelloAck) or ack.status != Status.OK:
        await conn.aclose()
        status = Status(ack.status) if isinstance(ack, HelloAck) else Status.BADMSG
        why = f": {ack.message}" if isinstance(ack, HelloAck) and ack.message else ""
        msg = f"{host}:{port} refused the handshake: {status.name}{why}"
        if status == Status.ACCESS:
            raise NotAuthenticatedError(msg)
        raise TransientError(msg, Status.CONNFAILED)
    conn.peer_node_id = ack.node_id
    conn.protocol = ack.protocol
    return conn


async def serve_connection(
    stream: trio.SocketStream,
    *,
    cluster: str,
    node_id: int,
    ssl_context: ssl.SSLContext | None = None,
    authenticate: Callable[[Hello, tuple[str, str] | None], Awaitable[Any]] | None = None,
    limits: ConnLimits = DEFAULT_LIMITS,
    peer: str = "client",
    budget: SendBudget | None = None,
) -> Connection | None:
    """Server side of the handshake.  Returns the connection, or None if it failed.

    ``authenticate`` returns the peer's principal, or a ``(Status, reason)``
    pair to refuse it.
    """
    _tcp(stream)
    # Until Hello is accepted, only one small frame of few items is read.
    decoder = FrameDecoder(frame_bytes_max=limits.hello_bytes_max, items_max=64)
    conn: Connection | None = None
    try:
        with trio.fail_after(limits.handshake_s):
            wrapped: trio.abc.Stream = stream
            identity = None
            if await _wrong_security(stream, ssl_context is not None):
                return None
            if ssl_context is not None:
                tls = TlsStream(stream, ssl_context, server_side=True)
                await tls.do_handshake()
                identity = peer_identity(tls.getpeercert())
                wrapped = tls
            conn = Connection(wrapped, peer=peer, limits=limits, decoder=decoder, budget=budget)
            hello = await conn.receive_one()
            if not isinstance(hello, Hello):
                raise ProtocolError("first message must be Hello")
            version = choose_version(hello.protocol_min, hello.protocol_max)
            status, reason, principal = await _admit(
                hello, version, cluster, identity, authenticate
            )
            ack = HelloAck(int(status), version or 0, node_id, reason[:1024])
            await wrapped.send_all(encode_frame(ack))
            if status != Status.OK:
                await conn.aclose()
                return None
            conn.peer_node_id = hello.node_id
            conn.principal = principal
            conn.protocol = version or PROTOCOL_VERSION_MIN
    except (
        ProtocolError,
        TransientError,
        ssl.SSLError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        OSError,
    ):
        if conn is not None:
            await conn.aclose()
        else:
            await close_stream(stream)
        return None
    decoder.frame_bytes_max = FRAME_BYTES_MAX_DEFAULT
    decoder.items_max = limits.items_max
    return conn


#: The first byte of a TLS connection (a handshake record); a frame of ours
#: starts with its length's high byte, 0 for anything under 16 MiB.
TLS_HANDSHAKE_BYTE = 0x16
TLS_EXPECTED = (
    "this node speaks TLS: give the client the cluster's CA certificate "
    "(--ca or LOGSTRAND_CA) and a token (--token, LOGSTRAND_TOKEN or LOGSTRAND_TOKEN_FILE)"
)


async def _wrong_security(stream: trio.SocketStream, tls: bool) -> bool:
    """Does the peer speak TLS to a node without it, or plain text to a node
    with it?  Then it is told so at once (rather than after a timeout), in
    a form it can read, and the connection ends: True."""
    first = await stream.socket.recv(1, socket.MSG_PEEK)
    if not first or (first[0] == TLS_HANDSHAKE_BYTE) == tls:
        return False
    if tls:  # a plain-text client: our refusal, in plain text
        message = TLS_EXPECTED
    else:  # a TLS client: any plain bytes make its TLS layer fail at once
        message = "this node does not speak TLS"
    ack = HelloAck(int(Status.ACCESS), 0, 0, message)  # nothing of the node in clear
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.send_all(encode_frame(ack))
    await close_stream(stream)
    return True


async def _admit(
    hello: Hello,
    version: int | None,
    cluster: str,
    identity: tuple[str, str] | None,
    authenticate: Callable[[Hello, tuple[str, str] | None], Awaitable[Any]] | None,
) -> tuple[Status, str, Any]:
    """The server's answer to a Hello: its status, why (when refused), and
    the peer's principal."""
    if hello.cluster != cluster:
        return Status.ACCESS, f"this node is of cluster {cluster!r}", None
    if version is None:
        return Status.PROTONOSUPPORT, "", None
    if authenticate is None:
        return Status.OK, "", None
    got = await authenticate(hello, identity)
    if isinstance(got, tuple):
        status, reason = got
        return status, reason, None
    return Status.OK, "", got


def handshake_sync(
    host: str,
    port: int,
    cluster: str,
    *,
    timeout_s: float = 2.0,
    ssl_context: ssl.SSLContext | None = None,
    token: str | None = None,
) -> bool:
    """Blocking check that a node answers the handshake (for launchers and tests).

    A node with TLS needs ``ssl_context`` (and ``token`` or a client
    certificate in the context) to answer OK.
    """
    try:
        with contextlib.ExitStack() as stack:
            s: socket.socket = stack.enter_context(
                socket.create_connection((host, port), timeout=timeout_s)
            )
            if ssl_context is not None:
                s = stack.enter_context(ssl_context.wrap_socket(s, server_hostname=host))
            hello = Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster, None, token)
            s.sendall(encode_frame(hello))
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                buf += chunk
            ack = decode_body(buf[4 : 4 + struct.unpack(">I", buf[:4])[0]])
            return isinstance(ack, HelloAck) and ack.status == Status.OK
    except (OSError, ProtocolError):
        return False


def speaks_tls(host: str, port: int, *, timeout_s: float = 2.0) -> bool | None:
    """Does the node at ``host:port`` speak TLS?  None when it cannot be
    reached.  Only the protocol is learnt (no certificate is checked, nothing
    is sent past the TLS handshake): for tools that must know which kind of
    cluster they are aimed at before acting on its epoch store."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            try:
                with context.wrap_socket(raw, server_hostname=host):
                    return True
            except ssl.SSLError:
                # A node without TLS answers a handshake byte with a plain
                # refusal, which the TLS layer cannot parse.
                return False
    except OSError:
        return None
