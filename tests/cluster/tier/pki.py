"""The cluster's PKI, made fresh at every start: one CA, the API server's serving certificate, a client
certificate per identity (admin, controller manager, scheduler, the node), the service-account key pair,
and kubeconfig files that embed them."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Identity:
    """A client certificate's subject: the user name (CN) and groups (O) the API server sees."""

    file_stem: str
    user: str
    groups: tuple[str, ...] = ()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


class Pki:
    """Writes everything into ``directory``; file names are the attributes' contract with the processes."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        self._ca_key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memsync-cluster-tier-ca")])
        self._ca_cert = (
            self._builder(name, self._ca_key.public_key())
            .issuer_name(name)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(self._ca_key, hashes.SHA256())
        )
        _write(self.ca_crt, _pem_cert(self._ca_cert), 0o644)
        sa_key = _key()
        _write(self.sa_key, _pem_key(sa_key))
        _write(
            self.sa_pub,
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def _builder(self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + VALIDITY)
        )

    def _issue(
        self, stem: str, subject: x509.Name, usage: list[x509.ObjectIdentifier], sans: list[x509.GeneralName]
    ) -> tuple[Path, Path]:
        key = _key()
        builder = (
            self._builder(subject, key.public_key())
            .issuer_name(self._ca_cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        crt, key_path = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        _write(crt, _pem_cert(cert), 0o644)
        _write(key_path, _pem_key(key))
        return crt, key_path

    def serving(self, stem: str, ips: list[str], dns_names: tuple[str, ...]) -> tuple[Path, Path]:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)])
        return self._issue(stem, subject, [ExtendedKeyUsageOID.SERVER_AUTH], sans)

    def client(self, identity: Identity) -> tuple[Path, Path]:
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in identity.groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, identity.user))
        return self._issue(identity.file_stem, x509.Name(attrs), [ExtendedKeyUsageOID.CLIENT_AUTH], [])

    def kubeconfig(self, identity: Identity, server: str) -> Path:
        """A kubeconfig for ``identity`` at ``server`` with the certificates embedded."""
        crt, key = self.client(identity)

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode("ascii")

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "memsync",
                    "cluster": {"server": server, "certificate-authority-data": b64(self.ca_crt)},
                }
            ],
            "users": [
                {
                    "name": identity.user,
                    "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)},
                }
            ],
            "contexts": [{"name": "memsync", "context": {"cluster": "memsync", "user": identity.user}}],
            "current-context": "memsync",
        }
        path = self.dir / f"{identity.file_stem}.kubeconfig"
        _write(path, yaml.safe_dump(config).encode())
        return path
