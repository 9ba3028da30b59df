"""SASL PLAIN and SCRAM-SHA-256/512 for the Kafka front (``security._sasl``):
the right token passes, a wrong one, an unknown user and a malformed
message are refused alike, and the server's signature proves it knew the keys."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.security._sasl import (
    SaslError,
    ScramServer,
    check_plain,
    scram_client_proof,
    scram_credentials,
)

TOKEN = "lst_secret-token"
CREDS = {"ann": scram_credentials(TOKEN)}


def _exchange(mechanism: str, user: str, token: str) -> tuple[ScramServer, bytes]:
    server = ScramServer(mechanism, lambda u: CREDS.get(u, {}).get(mechanism))
    first_bare = f"n={user},r=clientnonce"
    server_first = server.first(f"n,,{first_bare}".encode()).decode()
    nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r={nonce}"
    proof = scram_client_proof(mechanism, token, first_bare, server_first, without_proof)
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
    for bad in ("\x00ann\x00nope", f"bob\x00ann\x00{TOKEN}", "no separators", "a\x00b\x00c\x00d"):
        with pytest.raises(SaslError):
            check_plain(bad.encode(), verify)


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_any_bytes_are_refused_or_answered_never_crash(first: bytes, final: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", lambda u: CREDS.get(u, {}).get("SCRAM-SHA-256"))
    try:
        server.first(first)
        server.final(final)
    except SaslError:
        return
    raise AssertionError("random bytes passed SCRAM")


def test_out_of_order_and_unknown_mechanisms_are_refused() -> None:
    with pytest.raises(SaslError):
        ScramServer("SCRAM-SHA-1", lambda u: None)
    with pytest.raises(SaslError, match="out of order"):
        ScramServer("SCRAM-SHA-256", lambda u: None).final(b"c=biws,r=x,p=AAAA")
