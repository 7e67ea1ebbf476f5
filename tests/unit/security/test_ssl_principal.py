"""tidelog.security.x500 and ssl_principal: the subject DN as Java prints it; KIP-371
mapping rules; the principal a certificate proves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tidelog.security import ssl_principal, x500
from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.principal import ANONYMOUS, KafkaPrincipal


def config_error(build: Callable[[], object]) -> SecurityConfigError:
    with pytest.raises(SecurityConfigError) as caught:
        build()
    return caught.value


# --- the subject DN ----------------------------------------------------------------------


def self_signed(name: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def attr(oid: x509.ObjectIdentifier, value: str) -> x509.NameAttribute[str]:
    return x509.NameAttribute(oid, value)


def test_the_dn_is_most_specific_first_as_java_prints_it() -> None:
    name = x509.Name(
        [
            attr(NameOID.COUNTRY_NAME, "US"),
            attr(NameOID.ORGANIZATION_NAME, "tidelog"),
            attr(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            attr(NameOID.COMMON_NAME, "alice"),
        ]
    )
    der = self_signed(name)
    assert x500.subject_dn(der) == "CN=alice,OU=eng,O=tidelog,C=US"
    assert x500.subject_dn(der) == name.rfc4514_string()
    assert ssl_principal.principal_from_certificate(der) == KafkaPrincipal.user(
        "CN=alice,OU=eng,O=tidelog,C=US"
    )


def test_dn_escaping_follows_javas_rfc2253() -> None:
    cases = {
        "a,b+c": r"CN=a\,b\+c",
        "x=y#z": r"CN=x\=y\#z",
        'q"<>;\\': r"CN=q\"\<\>\;\\",
        " padded ": r"CN=\ padded\ ",
        "  ": r"CN=\ \ ",
        "nul\0": r"CN=nul\00",
        "Zoë": "CN=Zoë",
    }
    for value, expected in cases.items():
        assert (
            x500.subject_dn(self_signed(x509.Name([attr(NameOID.COMMON_NAME, value)]))) == expected
        )


def test_attributes_without_an_rfc2253_keyword_print_as_oid_and_der_hex() -> None:
    name = x509.Name([attr(NameOID.EMAIL_ADDRESS, "a@b"), attr(NameOID.COMMON_NAME, "alice")])
    # IA5String (0x16), length 3, "a@b"
    assert x500.subject_dn(self_signed(name)) == "CN=alice,1.2.840.113549.1.9.1=#1603614062"


def test_a_multi_valued_rdn_joins_with_plus() -> None:
    rdn = x509.RelativeDistinguishedName(
        [attr(NameOID.COMMON_NAME, "alice"), attr(NameOID.USER_ID, "a1")]
    )
    name = x509.Name([x509.RelativeDistinguishedName([attr(NameOID.ORGANIZATION_NAME, "t")]), rdn])
    dn = x500.subject_dn(self_signed(name))
    assert dn in ("CN=alice+UID=a1,O=t", "UID=a1+CN=alice,O=t")  # DER's SET OF order


def test_no_certificate_is_anonymous_and_garbage_fails_authentication() -> None:
    assert ssl_principal.principal_from_certificate(None) == ANONYMOUS
    with pytest.raises(AuthenticationError):
        ssl_principal.principal_from_certificate(b"\x30\x03\x02\x01")


# --- ssl.principal.mapping.rules ---------------------------------------------------------

DN = "CN=Kafka-Client1,OU=ServiceUsers,O=Org,L=Santa Clara,ST=California,C=US"


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("DEFAULT", DN),
        ("", DN),
        ("RULE:^CN=(.*?),.*$/$1/", "Kafka-Client1"),
        ("RULE:^CN=(.*?),.*$/$1/L", "kafka-client1"),
        ("RULE:^CN=(.*?),.*$/$1/U", "KAFKA-CLIENT1"),
        ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L", "kafka-client1@serviceusers"),
        # the first rule that applies wins; DEFAULT catches the rest
        (
            "RULE:^CN=(.*?),OU=Admins,.*$/admin-$1/, RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
            "Kafka-Client1",
        ),
        ("RULE:^CN=nobody,.*$/x/,DEFAULT", DN),
        # $n past the last group is literal text, as Kafka has it; $12 with one group: $1, "2"
        ("RULE:^CN=(.*?),.*$/$1-$3/", "Kafka-Client1-$3"),
        ("RULE:^CN=(.*?),.*$/$12/", "Kafka-Client12"),
        # Java's escapes and named groups
        (r"RULE:^CN=(.*?),.*$/\$1=$1/", "$1=Kafka-Client1"),
        ("RULE:^CN=(?<user>[^,]*),.*$/${user}/", "Kafka-Client1"),
        # Java's replaceAll: a pattern that also matches the empty string at the end
        ("RULE:.*/x/", "xx"),
        # an escaped slash belongs to the pattern
        (r"RULE:^CN=([^,]*),OU=Service\/?Users,.*$/$1/", "Kafka-Client1"),
    ],
)
def test_mapping_rules(rules: str, expected: str) -> None:
    assert ssl_principal.parse_principal_mapping_rules(rules).name(DN) == expected


def test_commas_inside_a_rule_do_not_split_it() -> None:
    rules = ssl_principal.parse_principal_mapping_rules(
        "RULE:^CN=(.*?),OU=(.*?),.*$/$2,$1/, DEFAULT"
    )
    assert len(rules.rules) == 2
    assert rules.name(DN) == "ServiceUsers,Kafka-Client1"


@pytest.mark.parametrize(
    "rules",
    [
        "RULE:abc",
        "RULE:^(.*)$/$1",
        "RULE:^(.*)$/$1/X",
        "RULE:^(.*)$/$1/Lx",
        "foo",
        "DEFAULTX",
        "DEFAULT, RULE:(unclosed/$1/",
        "RULE:^(.*)$/$/",
        "RULE:^(.*)$/x\\/",
        "RULE:^.*$/$1/",
        "RULE:^(.*)$/${nope}/",
    ],
)
def test_bad_mapping_rules_name_the_key(rules: str) -> None:
    error = config_error(lambda: ssl_principal.parse_principal_mapping_rules(rules))
    assert error.key == "ssl.principal.mapping.rules"


def test_a_dn_no_rule_applies_to_fails_authentication() -> None:
    der = self_signed(x509.Name([attr(NameOID.COMMON_NAME, "eve")]))
    with pytest.raises(AuthenticationError, match="CN=eve"):
        ssl_principal.principal_from_certificate(der, "RULE:^CN=(.*?),O=tidelog$/$1/")
    rules = ssl_principal.parse_principal_mapping_rules("RULE:^CN=(.*)$/$1/U")
    assert ssl_principal.principal_from_certificate(der, rules) == KafkaPrincipal.user("EVE")
