"""The subject DN of a DER certificate as Java's ``X500Principal.getName()`` prints it
(RFC 2253), the name Kafka's SSL principal starts from.

RDNs most specific first, keywords only for CN, C, L, ST, O, OU, STREET, DC and UID, any
other attribute as its dotted OID and ``#`` plus the hex of its DER value;
``, = + < > # ; " \\`` escaped with a backslash, leading and trailing spaces too, NUL as
``\\00``. The DN is read from the certificate's own DER, so encodings are never normalised
away.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

_RFC2253_KEYWORDS: Final = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# The string types Java prints as text: PrintableString, T61String, IA5String,
# GeneralString, BMPString, UTF8String (by their DER tags).
_STRING_CODECS: Final = {
    0x13: "ascii",
    0x14: "latin-1",
    0x16: "ascii",
    0x1B: "latin-1",
    0x1E: "utf-16-be",
    0x0C: "utf-8",
}
_ESCAPED: Final = frozenset(',=+<>#;"\\')
_SEQUENCE: Final = 0x30
_SET: Final = 0x31
_OID: Final = 0x06


def _element(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, end) of the DER element at ``pos``; ValueError if malformed."""
    if pos + 2 > len(data):
        raise ValueError("truncated DER")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise ValueError("multi-byte DER tag")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        size = length & 0x7F
        if not 1 <= size <= 4 or pos + size > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[pos : pos + size], "big")
        pos += size
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(tag, content start, content end, element start) of each element in data[start:end]."""
    pos = start
    while pos < end:
        tag, content, after = _element(data, pos)
        if after > end:
            raise ValueError("DER element overruns its parent")
        yield tag, content, after, pos
        pos = after


def _dotted(body: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs or value:
        raise ValueError("bad OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


def _escape(value: str) -> str:
    text = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in value)
    lead = len(text) - len(text.lstrip(" \r"))  # leading spaces: escaped
    end = len(text.rstrip(" \r"))  # trailing spaces from here: escaped
    return "".join("\\" + c if i < lead or i >= end else c for i, c in enumerate(text))


def _attribute(data: bytes, start: int, end: int) -> str:
    parts = list(_children(data, start, end))
    if len(parts) != 2 or parts[0][0] != _OID:
        raise ValueError("bad AttributeTypeAndValue")
    oid = _dotted(data[parts[0][1] : parts[0][2]])
    tag, content, after, element = parts[1]
    keyword = _RFC2253_KEYWORDS.get(oid)
    codec = _STRING_CODECS.get(tag)
    if keyword is None or codec is None:
        return f"{keyword or oid}=#{data[element:after].hex()}"
    return f"{keyword}={_escape(data[content:after].decode(codec))}"


def subject_dn(der: bytes) -> str:
    """The subject DN of a DER certificate as Java's ``X500Principal.getName()`` prints it
    (RFC 2253: ``CN=alice,OU=eng,O=tidelog``). ValueError if the DER is malformed."""
    tag, start, end = _element(der, 0)
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    tag, start, end = _element(der, start)  # TBSCertificate
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    fields = list(_children(der, start, end))
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise ValueError("certificate without a subject")
    _, name_start, name_end, _ = fields[4]
    rdns = []
    for rdn_tag, rdn_start, rdn_end, _ in _children(der, name_start, name_end):
        if rdn_tag != _SET:
            raise ValueError("bad RelativeDistinguishedName")
        avas = []
        for ava_tag, ava_start, ava_end, _ in _children(der, rdn_start, rdn_end):
            if ava_tag != _SEQUENCE:
                raise ValueError("bad AttributeTypeAndValue")
            avas.append(_attribute(der, ava_start, ava_end))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))
