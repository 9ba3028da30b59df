"""SASL PLAIN and SCRAM-SHA-256/512 for the Kafka front (``security._sasl``):
the right token passes, a wrong one, an unknown user and a malformed
message are refused alike, the server's signature proves it knew the keys,
messages are parsed once by RFC 5802's grammar, and nothing tells which
users exist."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.security._sasl import (
    ITERATIONS,
    SaslError,
    ScramServer,
    check_plain,
    mock_credentials,
    parse_client_final,
    parse_client_first,
    parse_plain,
    scram_client_proof,
    scram_credentials,
)

TOKEN = "lst_secret-token"
CREDS = {"ann": scram_credentials(TOKEN)}
SECRET = b"s" * 32


def _creds(mechanism: str, user: str) -> dict[str, object]:
    return CREDS.get(user, {}).get(mechanism) or mock_credentials(SECRET, mechanism, user)


def _exchange(
    mechanism: str, user: str, token: str, first: str | None = None
) -> tuple[ScramServer, bytes]:
    first = first or f"n,,n={user},r=clientnonce"
    parsed = parse_client_first(first.encode())
    server = ScramServer(mechanism)
    server_first = server.first(parsed, _creds(mechanism, parsed.user)).decode()
    nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r={nonce}"
    proof = scram_client_proof(mechanism, token, parsed.bare, server_first, without_proof)
    return server, server.final(f"{without_proof},p={proof}".encode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_the_token_passes_and_the_server_signs(mechanism: str) -> None:
    server, final = _exchange(mechanism, "ann", TOKEN)
    assert server.user == "ann"
    # The client checks the server's signature with the keys it derives itself.
    keys = CREDS["ann"][mechanism]
    assert final.startswith(b"v=")
    assert len(base64.b64decode(final[2:])) == len(base64.b64decode(keys["server_key"]))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize(("user", "token"), [("ann", "lst_wrong"), ("bob", TOKEN)])
def test_scram_with_a_wrong_token_or_user_is_refused_alike(
    mechanism: str, user: str, token: str
) -> None:
    with pytest.raises(SaslError, match="bad user name or password"):
        _exchange(mechanism, user, token)


def test_the_name_parsed_is_the_name_authenticated() -> None:
    """The attack: a client-first whose rough reading names eve (for the
    keys) and whose attributes name admin (for the identity).  One parse
    refuses it; a nonce holding ``n=`` is only a nonce."""
    with pytest.raises(SaslError, match="expected n="):
        parse_client_first(b"n,,r=xn=eve,n=admin")
    server, _ = _exchange("SCRAM-SHA-256", "ann", TOKEN, first="n,,n=ann,r=xn=admin")
    assert server.user == "ann"


@pytest.mark.parametrize(
    "first",
    [
        "n,,n=ann,n=admin,r=abc",  # n twice
        "n,,n=ann,r=abc,r=def",  # r twice
        "n,,r=abc,n=ann",  # out of order
        "n,,n=ann",  # no nonce
        "n,,n=,r=abc",  # an empty name
        "n,,n=a=ZZ,r=abc",  # a bad escape
        "n,,n=ann,r=a c",  # a nonce that is not printable
        "n,,n=ann,r=abc,ext=1,ext=2",  # an extension twice
        "n,,n=ann,r=abc,tokenauth=true",  # delegation tokens
        "n,,m=x,n=ann,r=abc",  # a mandatory extension
        "n,a=bob,n=ann,r=abc",  # acting for another user
        "p=tls-unique,,n=ann,r=abc",  # channel binding
        "x,,n=ann,r=abc",  # a bad GS2 flag
        "n,n=ann,r=abc",  # no authzid field
        "n,,n=ann\x00,r=abc",  # a NUL
    ],
)
def test_malformed_client_first_messages_are_refused(first: str) -> None:
    with pytest.raises(SaslError):
        parse_client_first(first.encode())


def test_what_the_rfc_allows_is_taken() -> None:
    parsed = parse_client_first(b"y,a=a=2Cb,n=a=2Cb,r=xyz,ext=1")
    assert (parsed.user, parsed.nonce, parsed.gs2_header) == ("a,b", "xyz", "y,a=a=2Cb,")
    assert parsed.bare == "n=a=2Cb,r=xyz,ext=1"
    final = parse_client_final(b"c=biws,r=xyzabc,p=AAAA")
    assert (final.channel_binding, final.nonce, final.without_proof) == (
        b"n,,",
        "xyzabc",
        "c=biws,r=xyzabc",
    )
    for bad in (b"r=xyz,c=biws,p=AAAA", b"c=biws,r=x,r=y,p=AAAA", b"c=biws,r=x", b"c=!!,r=x,p=AA"):
        with pytest.raises(SaslError):
            parse_client_final(bad)


def test_a_name_that_is_no_user_gets_the_same_salt_every_time() -> None:
    a = mock_credentials(SECRET, "SCRAM-SHA-256", "nobody")
    assert a == mock_credentials(SECRET, "SCRAM-SHA-256", "nobody")
    assert a["iterations"] == ITERATIONS == CREDS["ann"]["SCRAM-SHA-256"]["iterations"]
    assert len(base64.b64decode(a["salt"])) == len(
        base64.b64decode(CREDS["ann"]["SCRAM-SHA-256"]["salt"])
    )
    assert a["salt"] != mock_credentials(SECRET, "SCRAM-SHA-256", "nobody2")["salt"]
    assert a["salt"] != mock_credentials(SECRET, "SCRAM-SHA-512", "nobody")["salt"]
    assert a["salt"] != mock_credentials(b"t" * 32, "SCRAM-SHA-256", "nobody")["salt"]


def test_the_epoch_store_keeps_no_token() -> None:
    kept = repr(CREDS)
    assert TOKEN not in kept
    assert hashlib.sha256(TOKEN.encode()).hexdigest() not in kept
    # Two users with one token still get different salts and keys.
    again = scram_credentials(TOKEN)["SCRAM-SHA-256"]
    assert again["salt"] != CREDS["ann"]["SCRAM-SHA-256"]["salt"]
    assert not hmac.compare_digest(again["stored_key"], CREDS["ann"]["SCRAM-SHA-256"]["stored_key"])


def test_plain_checks_the_token_and_refuses_acting_for_another() -> None:
    def verify(user: str, token: str) -> bool:
        return user == "ann" and token == TOKEN

    assert check_plain(f"\x00ann\x00{TOKEN}".encode(), verify) == "ann"
    assert check_plain(f"ann\x00ann\x00{TOKEN}".encode(), verify) == "ann"
    for bad in (
        "\x00ann\x00nope",
        f"bob\x00ann\x00{TOKEN}",
        "no separators",
        "a\x00b\x00c\x00d",
        f"\x00\x00{TOKEN}",
    ):
        with pytest.raises(SaslError):
            check_plain(bad.encode(), verify)
    assert parse_plain(b"\x00ann\x00t").user == "ann"


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_any_bytes_are_refused_or_answered_never_crash(first: bytes, final: bytes) -> None:
    try:
        parsed = parse_client_first(first)
        server = ScramServer("SCRAM-SHA-256")
        server.first(parsed, _creds("SCRAM-SHA-256", parsed.user))
        server.final(final)
    except SaslError:
        return
    raise AssertionError("random bytes passed SCRAM")


def test_out_of_order_and_unknown_mechanisms_are_refused() -> None:
    with pytest.raises(SaslError):
        ScramServer("SCRAM-SHA-1")
    with pytest.raises(SaslError, match="out of order"):
        ScramServer("SCRAM-SHA-256").final(b"c=biws,r=x,p=AAAA")
    server = ScramServer("SCRAM-SHA-256")
    first = parse_client_first(b"n,,n=ann,r=abc")
    server.first(first, _creds("SCRAM-SHA-256", "ann"))
    with pytest.raises(SaslError, match="out of order"):
        server.first(first, _creds("SCRAM-SHA-256", "ann"))
