"""Who may do what: principals, grants, tokens, TLS contexts (docs/security.md).

``LocalCA`` (certificates for ``dev up --secure``) needs ``cryptography`` and
is imported from ``logstrand.security._certs`` where it is used.
"""

from ._access import Access
from ._model import (
    NODE_ONLY,
    OPS,
    TRUSTED,
    Grant,
    Principal,
    check_name,
    hash_token,
    new_token,
    node_principal,
    parse_log_range,
    parse_ops,
    refusal,
    user_of_token,
    user_principal,
)
from ._sasl import MECHANISMS, SaslError, ScramServer, check_plain, scram_credentials
from ._tls import (
    Credentials,
    TlsFiles,
    client_context,
    credentials_from_env,
    peer_identity,
    read_token,
    server_context,
)

__all__ = [
    "MECHANISMS",
    "NODE_ONLY",
    "OPS",
    "TRUSTED",
    "Access",
    "Credentials",
    "Grant",
    "Principal",
    "SaslError",
    "ScramServer",
    "TlsFiles",
    "check_name",
    "check_plain",
    "client_context",
    "credentials_from_env",
    "hash_token",
    "new_token",
    "node_principal",
    "parse_log_range",
    "parse_ops",
    "peer_identity",
    "read_token",
    "refusal",
    "scram_credentials",
    "server_context",
    "user_of_token",
    "user_principal",
]
