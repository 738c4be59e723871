"""Each replica's own TLS identity, and the context its callers pin it with (pure but for randomness).

The nodes are shared. An engine that dies (`kill -9`, the OOM killer) frees
its port, and another user may bind it within milliseconds; whoever calls
the old address next — the console's health check, `ask`, a gateway — would
hand that process the operator's prompt and the engine's key. So every
replica gets a certificate of its own, made here in memory when it is
launched: the engine serves HTTPS with it, and every caller trusts exactly
that certificate and nothing else. A process that binds the port later does
not hold the private key, so its handshake fails before one byte of a
request is sent.

* The certificate is public: it is recorded in the replica's spec
  (`tls_cert`), where every console and gateway finds it.
* The private key is a secret: it travels only as the serving shard's
  `secret_env` (`KEY_VARIABLE`), which the agent hands the engine as an
  anonymous in-memory file (`agent/llmgw_agent/shards/memfiles.py`) — never
  a file on the node, a command line, a record or a log.

The engines are given `CERT_PLACEHOLDER` and `KEY_PLACEHOLDER` in their argv;
the agent replaces them with `/dev/fd/N` paths of those in-memory files.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass, field

ENGINE_NAME = "llmgw-engine"
"""The certificate's common name and DNS name (callers pin the certificate, not a name)."""

CERT_VARIABLE = "LLMGW_ENGINE_TLS_CERT"
KEY_VARIABLE = "LLMGW_ENGINE_TLS_KEY"
"""The shard's secret variables holding the PEM texts (`agent/llmgw_agent/shards/memfiles.py`
reads the same names)."""

CERT_PLACEHOLDER = "@LLMGW_TLS_CERTFILE@"
KEY_PLACEHOLDER = "@LLMGW_TLS_KEYFILE@"
"""What the command builders write where an engine takes a certificate or key file; the agent
puts a `/dev/fd/N` path of an in-memory file there."""

VALID_DAYS = 3650
"""How long a certificate is valid: longer than any replica lives (a heal makes a new one)."""
SKEW_S = 3600
"""How far before now a certificate starts: a node's clock behind the console's still accepts it."""


@dataclass(frozen=True)
class EngineIdentity:
    """One replica's certificate (public) and private key (secret), as PEM text.

    Attributes:
        cert_pem: the self-signed certificate, recorded in the replica's spec.
        key_pem: its EC P-256 private key; only ever a shard's `secret_env`.
    """

    cert_pem: str
    key_pem: str = field(repr=False)

    @classmethod
    def make(cls, replica: str = "", now: datetime.datetime | None = None) -> EngineIdentity:
        """A new key and a self-signed certificate for `replica`, made in memory.

        Args:
            replica: the replica's name, put in the certificate's organisational
                unit so a certificate read on its own says whose it is.
            now: the time it is made at (tests); None: the clock.
        """
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, ENGINE_NAME)]
        if replica:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, replica[:64]))
        name = x509.Name(attributes)
        start = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(seconds=SKEW_S)
        public = key.public_key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(ENGINE_NAME)]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), False)
            .sign(key, hashes.SHA256())
        )
        return cls(
            cert_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
            key_pem=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode(),
        )

    def secret_env(self) -> dict[str, str]:
        """The serving shard's secret variables: the key, and the certificate beside it."""
        return {CERT_VARIABLE: self.cert_pem, KEY_VARIABLE: self.key_pem}


def tls_flags(cert_flag: str, key_flag: str) -> list[str]:
    """An engine's two file flags, given the placeholders the agent fills with `/dev/fd/N`."""
    return [cert_flag, CERT_PLACEHOLDER, key_flag, KEY_PLACEHOLDER]


def pinned_context(cert_pem: str) -> ssl.SSLContext:
    """A client context that trusts `cert_pem` and nothing else (TLS 1.2 or later).

    No name is checked: the pin is the certificate itself, and only the holder
    of its private key can complete a handshake with it.

    Raises:
        ValueError: `cert_pem` is not a PEM certificate.
    """
    try:
        context = ssl.create_default_context(cadata=cert_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"the engine's certificate is not a PEM certificate: {exc}") from None
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
