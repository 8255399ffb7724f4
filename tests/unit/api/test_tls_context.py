"""The TLS context clients share follows the CA variables an admin sets (SSL_CERT_FILE, SSL_CERT_DIR):
built once per value, not once per process."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from det_airflow.api._http import tls_context


def _authority(path: Path, name: str) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _subjects(context: object) -> set[str]:
    return {
        value
        for cert in context.get_ca_certs()
        for rdn in cert["subject"]
        for key, value in rdn  # type: ignore[attr-defined]
        if key == "commonName"
    }


def test_a_new_ca_file_is_trusted_once_set_and_the_old_one_no_longer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(_authority(tmp_path / "first.pem", "first authority")))
    first = tls_context()
    assert tls_context() is first  # kept: reading a bundle is slow
    assert _subjects(first) == {"first authority"}

    monkeypatch.setenv("SSL_CERT_FILE", str(_authority(tmp_path / "second.pem", "second authority")))
    assert _subjects(tls_context()) == {"second authority"}
