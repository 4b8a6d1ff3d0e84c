"""X.509 for ``spec.tls``: the store's own CA and the server certificate its pods present.

Pure functions over PEM bytes (``cryptography`` does the work), so the reconciler decides
when to issue and the tests can look inside what was issued. Keys are ECDSA P-256: quick to
make, and every gRPC and RocketMQ client speaks it. The server certificate is also a client
certificate (both extended key usages): the members present it to each other, and the
operator presents it, when ``clientAuthentication: Required`` asks for one.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY_DAYS = 3650  # the CA is not renewed by the operator (docs/store-format.md §20.6)
BACKDATE = datetime.timedelta(minutes=5)  # clocks of clients a little behind the operator's


@dataclass(frozen=True)
class Pair:
    cert: bytes  # PEM
    key: bytes  # PEM (PKCS#8, unencrypted: it lives in a Secret)


@dataclass(frozen=True)
class Issued:
    """What a certificate says, as far as renewing it is concerned."""

    not_after: datetime.datetime
    dns: frozenset[str]
    ips: frozenset[str]
    issuer: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "msgstore"), x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def issue_ca(common_name: str, now: datetime.datetime) -> Pair:
    key = _key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def issue_server(ca: Pair, common_name: str, dns: list[str], ips: list[str], days: float, now: datetime.datetime) -> Pair:
    """A certificate for ``dns`` and ``ips`` signed by ``ca``, valid ``days`` from ``now``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    key = _key()
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns)]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def read(cert_pem: bytes) -> Issued:
    """ValueError when ``cert_pem`` is not a PEM certificate."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = frozenset(san.get_values_for_type(x509.DNSName))
        ips = frozenset(str(i) for i in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns = ips = frozenset()
    return Issued(cert.not_valid_after_utc, dns, ips, cert.issuer.rfc4514_string())


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether ``ca_pem`` signed ``cert_pem`` (a server certificate left from a replaced CA is not)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
        return False
    return True


def key_matches(pair: Pair) -> bool:
    cert = x509.load_pem_x509_certificate(pair.cert)
    key = serialization.load_pem_private_key(pair.key, None)
    return cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) == (
        key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
