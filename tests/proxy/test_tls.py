"""amqps on the client side: the proxy presents a certificate (a test CA made here) and, with
--verify-peer, checks the client's."""
from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pika
import pytest

from rtroute.ops.netaddr import free_port

from .conftest import assert_round_trip, proxy_uri

pytestmark = pytest.mark.broker
cryptography = pytest.importorskip("cryptography")


def _make_ca(tmp: Path) -> dict[str, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject: str, key, issuer_name, issuer_key, ca: bool, san: bool):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san:
            import ipaddress
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def write(name: str, key, certificate) -> tuple[Path, Path]:
        key_path, cert_path = tmp / f"{name}.key", tmp / f"{name}.pem"
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return key_path, cert_path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rtroute test CA")])
    ca = cert("rtroute test CA", ca_key, ca_name, ca_key, True, False)
    paths = {}
    _, paths["ca"] = write("ca", ca_key, ca)
    for name in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        paths[f"{name}_key"], paths[name] = write(
            name, key, cert(f"rtroute test {name}", key, ca_name, ca_key, False, True))
    return paths


def _tls_connection(port: int, paths: dict[str, Path], client_cert: bool):
    context = ssl.create_default_context(cafile=str(paths["ca"]))
    if client_cert:
        context.load_cert_chain(str(paths["client"]), str(paths["client_key"]))
    params = pika.URLParameters(proxy_uri(port, "amqps"))
    params.ssl_options = pika.SSLOptions(context, "localhost")
    return pika.BlockingConnection(params)


def test_a_client_reaches_the_broker_over_amqps_with_a_certificate(proxies, tmp_path,
                                                                   exchange_name):
    paths = _make_ca(tmp_path)
    port = free_port()
    proxies("--listen-tls", f"127.0.0.1:{port}", "--certfile", str(paths["server"]),
            "--keyfile", str(paths["server_key"]), "--cacertfile", str(paths["ca"]),
            "--verify-peer", port=port)
    conn = _tls_connection(port, paths, client_cert=True)
    try:
        assert_round_trip(conn.channel(), exchange_name, b"over tls")
    finally:
        conn.close()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _tls_connection(port, paths, client_cert=False)  # --verify-peer wants a certificate
