"""A CA and certificates for a local cluster (``logstrand dev up --secure``).

For a real cluster, use your organisation's CA; docs/security.md says what a
node certificate must contain.  These are ECDSA P-256 keys, valid for a year.
"""

from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ._tls import NODE_URI, USER_URI

_VALID = datetime.timedelta(days=365)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: str, data: bytes, *, secret: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class LocalCA:
    """A CA kept in ``directory`` (``ca.pem``, ``ca.key``) that signs node and
    client certificates next to it."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.ca_path = os.path.join(directory, "ca.pem")
        key_path = os.path.join(directory, "ca.key")
        if os.path.exists(self.ca_path) and os.path.exists(key_path):
            with open(self.ca_path, "rb") as f:
                self._cert = x509.load_pem_x509_certificate(f.read())
            with open(key_path, "rb") as f:
                loaded = serialization.load_pem_private_key(f.read(), None)
            assert isinstance(loaded, ec.EllipticCurvePrivateKey)
            self._key = loaded
            return
        self._key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "logstrand local CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        _write(key_path, _pem_key(self._key), secret=True)
        _write(self.ca_path, self._cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, name: str, uri: str, hosts: list[str], stem: str) -> tuple[str, str]:
        key = _key()
        sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(uri)]
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        cert_path = os.path.join(self.directory, f"{stem}.pem")
        key_path = os.path.join(self.directory, f"{stem}.key")
        _write(key_path, _pem_key(key), secret=True)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path

    def node(self, node_id: int, hosts: list[str]) -> tuple[str, str]:
        """A node's certificate and key (paths): its id, and the hosts or
        addresses clients reach it by."""
        return self._issue(
            f"logstrand node {node_id}", f"{NODE_URI}{node_id}", hosts, f"node{node_id}"
        )

    def user(self, name: str) -> tuple[str, str]:
        """A client certificate for user ``name`` (paths)."""
        return self._issue(f"logstrand user {name}", f"{USER_URI}{name}", [], f"user-{name}")
