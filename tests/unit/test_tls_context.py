"""The TLS context from the tls-* settings (daemon/tls.py): what it allows,
and a refusal naming the setting and the file for every way the files can
be wrong.  ``config.load`` runs the same check, so the daemon refuses to
start on these (tests/integration/test_tls.py starts it)."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from leaseq.daemon import config
from leaseq.daemon.tls import server_context


def settings(pki, **changes) -> config.Settings:
    base = dict(tls_port=6380, tls_cert_file=pki.server_cert, tls_key_file=pki.server_key, tls_ca_cert_file=pki.ca)
    return config.Settings(**{**base, **changes})


def refusal(s: config.Settings) -> str:
    with pytest.raises(config.ConfigError) as e:
        server_context(s)
    return str(e.value)


@pytest.mark.parametrize("auth, mode", [("yes", ssl.CERT_REQUIRED), ("optional", ssl.CERT_OPTIONAL),
                                        ("no", ssl.CERT_NONE)])
def test_tls_auth_clients_is_the_verify_mode(pki, auth, mode):
    assert server_context(settings(pki, tls_auth_clients=auth)).verify_mode == mode


@pytest.mark.parametrize("protocols, low, high", [
    ("TLSv1.2 TLSv1.3", ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
    ("tlsv1.3", ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3),
    ("TLSv1.2", ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2),
])
def test_tls_protocols_bound_the_versions(pki, protocols, low, high):
    context = server_context(settings(pki, tls_protocols=protocols))
    assert (context.minimum_version, context.maximum_version) == (low, high)


def test_no_ca_is_needed_when_clients_are_not_asked_for_certificates(pki):
    assert server_context(settings(pki, tls_auth_clients="no", tls_ca_cert_file="")).verify_mode == ssl.CERT_NONE


def test_missing_settings_are_named(pki):
    assert refusal(settings(pki, tls_cert_file="")) == "'tls-port' is 6380 but 'tls-cert-file' is not set"
    assert refusal(settings(pki, tls_key_file="")) == "'tls-port' is 6380 but 'tls-key-file' is not set"
    assert refusal(settings(pki, tls_ca_cert_file="")).startswith(
        "'tls-auth-clients' is yes but 'tls-ca-cert-file' is not set")
    assert refusal(settings(pki, tls_port=6479, port=6479)).startswith("'tls-port' 6479 is also 'port'")
    assert refusal(settings(pki, tls_protocols="TLSv1.1")) == \
        "'tls-protocols' must name TLSv1.2, TLSv1.3 or both, not 'TLSv1.1'"


def test_files_that_cannot_be_used_are_named_with_their_setting(pki, tmp_path):
    missing = str(tmp_path / "nope.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert refusal(settings(pki, tls_cert_file=missing)) == \
        f"'tls-cert-file' {missing} cannot be read: No such file or directory"
    assert refusal(settings(pki, tls_key_file=str(tmp_path))) == \
        f"'tls-key-file' {tmp_path} cannot be read: Is a directory"
    assert refusal(settings(pki, tls_ca_cert_file=missing)).startswith(f"'tls-ca-cert-file' {missing} cannot be read")
    assert refusal(settings(pki, tls_cert_file=str(garbage))) == f"'tls-cert-file' {garbage} holds no PEM certificate"
    assert refusal(settings(pki, tls_key_file=pki.server_cert)) == \
        f"'tls-key-file' {pki.server_cert} holds no PEM private key"
    assert refusal(settings(pki, tls_ca_cert_file=str(garbage))) == \
        f"'tls-ca-cert-file' {garbage} holds no PEM certificate"


def test_a_key_that_is_not_the_certificates_is_refused(pki):
    assert refusal(settings(pki, tls_key_file=pki.client_key)) == \
        f"'tls-key-file' {pki.client_key} is not the private key of 'tls-cert-file' {pki.server_cert}"


def test_an_encrypted_key_is_refused_instead_of_prompting(pki, tmp_path):
    encrypted = str(tmp_path / "encrypted.key")
    subprocess.run([shutil.which("openssl"), "ec", "-in", pki.server_key, "-aes256", "-passout", "pass:secret",
                    "-out", encrypted], check=True, capture_output=True, timeout=30)
    assert refusal(settings(pki, tls_key_file=encrypted)) == \
        f"'tls-key-file' {encrypted} is encrypted: leaseq reads only unencrypted keys"


def test_config_load_checks_the_files_only_when_tls_port_is_set(pki, tmp_path):
    missing = str(tmp_path / "nope.pem")
    env = {"LEASEQ_TLS_CERT_FILE": missing}
    assert config.load(None, environ=env).tls_cert_file == missing          # tls-port 0: not read
    with pytest.raises(config.ConfigError, match="'tls-cert-file' .* cannot be read"):
        config.load(None, environ={**env, "LEASEQ_TLS_PORT": "6380", "LEASEQ_TLS_KEY_FILE": pki.server_key,
                                   "LEASEQ_TLS_CA_CERT_FILE": pki.ca})
