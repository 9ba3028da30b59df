"""Who a Kafka connection is and what it may do, in secure mode.

A node in secure mode serves the Kafka front over TLS (its own certificate,
the cluster's CA: SASL_SSL), and a connection must authenticate with SASL
before anything but ApiVersions, SaslHandshake and SaslAuthenticate: a
request before that closes the connection, as a Kafka broker does.  The
SASL user name is a logstrand user and the password its token
(``security._sasl``: PLAIN checks the token's hash, SCRAM the keys derived
from it when the user was added).

A SaslHandshake v0 (Kafka 0.10's, which kafka-python 2.0 still sends) is
followed by the SASL messages themselves, each a frame of its own with no
Kafka header, and each answered the same way (``raw``), until the login is
done; then Kafka requests follow as usual.

A failed login is answered after ``FAILED_LOGIN_DELAY_S`` and ends its
connection (Kafka's connection.failed.authentication.delay.ms), and a name
that is not a user is looked up in the epoch store at most every
``security.RECHECK_S`` however often it is tried.

The front then acts for that user: each partition a request touches is
checked against the user's grants as the native protocol checks them
(read for Fetch, ListOffsets, OffsetFetch and OffsetCommit; append for
Produce; trim for DeleteRecords; admin over every log for the APIs that
make, change or delete topics), and each group a group API names against
the user's grants on groups (read to be a member or commit, describe to
see it, delete to remove it or its offsets: Kafka's GROUP resource).  What
is refused is answered with TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED (or CLUSTER_AUTHORIZATION_FAILED), nothing
done.  Users and grants are read from the epoch store, again every
``REFRESH_S``, at once for a user the front does not know, and before a
refusal when they are older than ``RECHECK_S`` (so a new grant counts
within ``RECHECK_S``, and a revoked one within ``REFRESH_S``).
"""

from __future__ import annotations

import base64
import hmac
import logging
from typing import TYPE_CHECKING, Any

import trio

from ..kafka_errors import KafkaError
from ..security import (
    MECHANISMS,
    REFUSED,
    Access,
    SaslError,
    ScramServer,
    hash_token,
    mock_credentials,
    parse_client_first,
    parse_plain,
)
from ._protocol import BEFORE_AUTH
from ._server import CloseConnection

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")
#: A failed login is answered this late, then its connection is closed
#: (Kafka's connection.failed.authentication.delay.ms): one connection can
#: no longer try hundreds of tokens a second.
FAILED_LOGIN_DELAY_S = 0.1


class NotAuthenticated(CloseConnection):
    """A request on a connection that has not authenticated (it is closed)."""


class FrontAuth:
    """SASL and grants for one front (see the module docstring)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        secure: bool,
        failed_login_delay_s: float = FAILED_LOGIN_DELAY_S,
    ) -> None:
        self.client = client
        self.secure = secure
        self.failed_login_delay_s = failed_login_delay_s
        self._secret: bytes | None = None

        async def read() -> dict[str, Any]:
            doc: dict[str, Any] = await client.view.astore.run(lambda s: s.security())
            return doc

        self.access = Access(read, client.view.range_name)

    # -- the gate -----------------------------------------------------------------

    def check(self, request: Request) -> None:
        """Raises NotAuthenticated for a request that needs a user and has none
        (the listener closes such a connection before decoding the request;
        this holds for any other way a request may come)."""
        needs = self.secure and request.api_key not in BEFORE_AUTH
        if needs and getattr(request.conn, "user", None) is None:
            raise NotAuthenticated(
                f"API {request.api_key} before SASL authentication (the front is in secure mode)"
            )

    # -- SASL --------------------------------------------------------------------------

    async def handshake(self, request: Request) -> dict[str, Any]:
        mechanism = request.body["mechanism"]
        if mechanism not in MECHANISMS:
            code = KafkaError.UNSUPPORTED_SASL_MECHANISM
            request.conn.closing = True  # as Kafka's brokers do
            return {"error_code": code, "mechanisms": list(MECHANISMS)}
        request.conn.sasl = mechanism
        request.conn.scram = None
        # v0: the SASL messages come next, raw (see the module docstring).
        request.conn.raw_sasl = request.version == 0
        return {"error_code": 0, "mechanisms": list(MECHANISMS)}

    async def authenticate(self, request: Request) -> dict[str, Any]:
        conn = request.conn
        mechanism = getattr(conn, "sasl", None)
        if mechanism is None:
            conn.closing = True
            return _auth_error(KafkaError.ILLEGAL_SASL_STATE, "SaslHandshake first")
        return await self._login(conn, mechanism, request.body["auth_bytes"])

    async def raw(self, conn: Any, data: bytes) -> bytes | None:
        """One raw SASL message after a v0 handshake: the answer to send
        back raw, or None when the login failed (the connection closes
        without a word: raw SASL has no way to say why)."""
        answer = await self._login(conn, conn.sasl, data)
        if answer["error_code"] != 0:
            return None
        if conn.user is not None:
            conn.raw_sasl = False  # logged in: Kafka requests from here on
        auth_bytes: bytes = answer["auth_bytes"]
        return auth_bytes

    async def _login(self, conn: Any, mechanism: str, data: bytes) -> dict[str, Any]:
        try:
            return await self._step(conn, mechanism, data)
        except SaslError as exc:
            conn.sasl = conn.scram = None
            _log.warning("kafka: %s: SASL %s refused: %s", conn.peer, mechanism, exc)
            # Late, and the last answer on this connection (rule of the module).
            await trio.sleep(self.failed_login_delay_s)
            conn.closing = True
            return _auth_error(KafkaError.SASL_AUTHENTICATION_FAILED, str(exc))

    async def _step(self, conn: Any, mechanism: str, data: bytes) -> dict[str, Any]:
        """One SASL message: the answer, or SaslError.  Each message is
        parsed once; the name it gives is looked up and authenticated
        (``security._sasl``, rule 1)."""
        # A login reads users again if they are older than RECHECK_S: a user
        # made again with a new token (users remove, users add) logs in at
        # once, not after the next periodic read (REFRESH_S).
        await self.access.refresh(force=True)
        if mechanism == "PLAIN":
            plain = parse_plain(data)
            user = await self.access.user(plain.user)
            if user is None or not hmac.compare_digest(hash_token(plain.token), user["sha256"]):
                raise SaslError(REFUSED)
            return self._done(conn, plain.user, b"")
        if conn.scram is None:
            first = parse_client_first(data)
            user = await self.access.user(first.user)
            creds = (user or {}).get("scram", {}).get(mechanism)
            if creds is None:  # no such user (or no keys): made-up ones, the same each time
                creds = mock_credentials(await self._sasl_secret(), mechanism, first.user)
            conn.scram = ScramServer(mechanism)
            return {"error_code": 0, "auth_bytes": conn.scram.first(first, creds)}
        final = conn.scram.final(data)
        return self._done(conn, conn.scram.user, final)

    async def _sasl_secret(self) -> bytes:
        if self._secret is None:
            await self.access.refresh()
            text = self.access.sasl_secret
            if text is None:
                text = await self.client.view.astore.run(lambda s: s.sasl_secret())
            self._secret = base64.b64decode(text)
        return self._secret

    def _done(self, conn: Any, name: str | None, answer: bytes) -> dict[str, Any]:
        if conn.user is not None and conn.user != name:
            # Kafka's re-authentication (KIP-368) keeps the principal.
            raise SaslError(f"this connection is {conn.user}'s; it cannot become {name}'s")
        conn.user, conn.sasl, conn.scram = name, None, None
        _log.info("kafka: %s authenticated as %s", conn.peer, name)
        return {"error_code": 0, "auth_bytes": answer, "session_lifetime_ms": 0}

    # -- grants ----------------------------------------------------------------------

    async def may(self, request: Request, op: str, log_id: int | None) -> bool:
        """Whether the connection's user may ``op`` on ``log_id`` (None: on
        every user log, for the APIs that make or change topics)."""
        if not self.secure:
            return True
        user = getattr(request.conn, "user", None)
        return user is not None and await self.access.may(user, op, log_id)

    async def may_group(self, request: Request, op: str, group: str) -> bool:
        """Whether the connection's user may ``op`` (read, describe, delete)
        on consumer group ``group``."""
        if not self.secure:
            return True
        user = getattr(request.conn, "user", None)
        return user is not None and await self.access.may_group(user, op, group)

    async def may_txn(self, request: Request, op: str, txn_id: str) -> bool:
        """Whether the connection's user may ``op`` (write, describe) with
        transactional id ``txn_id``."""
        if not self.secure:
            return True
        user = getattr(request.conn, "user", None)
        return user is not None and await self.access.may_txn(user, op, txn_id)

    def forget(self) -> None:
        """Users and grants changed through this front: read them again."""
        self.access.forget()


def _auth_error(code: int, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": b""}


#: APIs that make, change or delete topics, and the ACL ones: a user needs
#: admin on every log.
ADMIN_APIS = frozenset({19, 20, 29, 30, 31, 33, 37, 44})


def refused_admin(request: Request) -> dict[str, Any]:
    """The answer to an admin API the user may not use: every topic or
    resource it names refused with TOPIC_AUTHORIZATION_FAILED."""
    code, b = KafkaError.TOPIC_AUTHORIZATION_FAILED, request.body
    why = "needs admin on every log (a grant on 'all')"
    if request.api_key == 19:
        return {
            "topics": [
                {"name": t["name"], "error_code": code, "error_message": why} for t in b["topics"]
            ]
        }
    if request.api_key == 20:
        names = [t["name"] for t in b["topics"]] if request.version >= 6 else b["topic_names"]
        return {"responses": [{"name": n, "error_code": code, "error_message": why} for n in names]}
    if request.api_key == 29:
        return {"error_code": KafkaError.CLUSTER_AUTHORIZATION_FAILED, "error_message": why}
    if request.api_key == 30:
        return {
            "results": [
                {"error_code": KafkaError.CLUSTER_AUTHORIZATION_FAILED, "error_message": why}
                for _ in b["creations"]
            ]
        }
    if request.api_key == 31:
        return {
            "filter_results": [
                {"error_code": KafkaError.CLUSTER_AUTHORIZATION_FAILED, "error_message": why}
                for _ in b["filters"]
            ]
        }
    if request.api_key == 37:
        return {
            "results": [
                {"name": t["name"], "error_code": code, "error_message": why} for t in b["topics"]
            ]
        }
    return {
        "responses": [
            {
                "error_code": code,
                "error_message": why,
                "resource_type": r["resource_type"],
                "resource_name": r["resource_name"],
            }
            for r in b["resources"]
        ]
    }
