"""Where a webhook may send: the host of its URL is resolved once, and every address it resolves to
must be public, unless an admin allows the host, the address or its network in ``[det]
webhook_allowed_hosts``. The address found is the one the POST then connects to (``pinned_http``),
so a name that resolves elsewhere a moment later (DNS rebinding) changes nothing.

Public means none of loopback, private, link-local, unspecified, multicast, reserved, shared
(100.64.0.0/10) or a cloud's metadata address, for IPv4 and IPv6 alike, including IPv4 addresses
inside IPv6 ones (``::ffff:127.0.0.1``, 6to4). Numeric hosts in any spelling the resolver accepts
(``2130706433``, ``0x7f.1``) are judged by the address they resolve to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urlsplit

from det_airflow.errors import DetError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata services that the checks below would not already refuse (AWS, GCP and Azure use
# 169.254.169.254, link-local; AWS's IPv6 one is a unique-local address; Alibaba's is shared space).
_METADATA = tuple(
    ipaddress.ip_network(n)
    for n in ("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32", "192.0.0.192/32")
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


class AddressRefused(DetError):
    """A webhook URL the master will not send to: its shape, or where its host resolves."""


@dataclass(frozen=True)
class AllowList:
    """What ``[det] webhook_allowed_hosts`` lets webhooks reach although it is not public."""

    names: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, entries: Iterable[str]) -> AllowList:
        names, networks = set(), []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                names.add(entry.lower().rstrip("."))
        return cls(frozenset(names), tuple(networks))

    def allows(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks if network.version == address.version)


def admin_allowed() -> AllowList:
    """The allow-list airflow.cfg ``[det] webhook_allowed_hosts`` sets (empty by default)."""
    from det_airflow import settings

    return AllowList.of(settings.load().webhook_allowed_hosts)


@dataclass(frozen=True)
class Target:
    """A checked URL: the name it gives and the one address its POST connects to."""

    scheme: str
    host: str  # the name, IDNA-encoded: the Host header's and TLS's (certificate and SNI)
    port: int
    address: str  # where the connection goes
    target: str  # the path and query, percent-encoded
    host_header: str


def check_shape(url: str) -> SplitResult:
    """``url`` split, if it is an http(s) URL with a host and no user name or password."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise AddressRefused(f"webhook url {url!r}: an http:// or https:// address with a host")
    if parts.username is not None or parts.password is not None:
        raise AddressRefused(
            f"webhook url {url!r}: a user name or password in the address is not allowed; "
            "receivers check the signature instead"
        )
    if any(c.isspace() or not c.isprintable() for c in url):
        raise AddressRefused(f"webhook url {url!r}: spaces and control characters are not allowed")
    try:
        valid = parts.port != 0 and bool(_ascii_host(parts.hostname))
    except (ValueError, UnicodeError):
        valid = False
    if not valid:
        raise AddressRefused(f"webhook url {url!r}: not a valid host and port")
    return parts


def resolve(url: str, allowed: AllowList) -> Target:
    """Resolve ``url``'s host once and check every address it gives; raises :class:`AddressRefused`
    unless all are public or allowed. The message says so without telling which is the case, nor
    whether the name resolves at all."""
    parts = check_shape(url)
    host = _ascii_host(parts.hostname or "")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    refused = AddressRefused(
        f"webhook url {url!r}: {host!r} does not resolve to public addresses only (loopback, private, "
        "link-local, reserved and cloud metadata addresses are refused unless an admin lists the host in "
        "airflow.cfg [det] webhook_allowed_hosts)"
    )
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise refused from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found))
    if not addresses:
        raise refused
    if host not in allowed.names and not all(is_public(a) or allowed.allows(a) for a in addresses):
        raise refused
    target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
    if parts.query:
        target += "?" + quote(parts.query, safe="/%:@!$&'()*+,;=-._~?")
    return Target(parts.scheme, host, port, str(addresses[0]), target, _host_header(parts, host))


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is one anybody on the internet could reach, none of the platform's own."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None and not is_public(inner):
            return False
        if address.teredo is not None:
            return False
    if any(address in network for network in _METADATA if network.version == address.version):
        return False
    return address.is_global and not (address.is_multicast or address.is_reserved)


def _ascii_host(hostname: str) -> str:
    host = hostname.lower().rstrip(".")
    return host if host.isascii() else host.encode("idna").decode("ascii")


def _host_header(parts: SplitResult, host: str) -> str:
    name = f"[{host}]" if ":" in host else host
    return f"{name}:{parts.port}" if parts.port is not None else name
