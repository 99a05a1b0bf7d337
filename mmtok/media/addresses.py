"""Where a URL may lead: its host resolved once (within the read's deadline) and checked, the connection pinned to
the address checked, and URLs shown in messages without what may be secret in them."""

from __future__ import annotations

import ipaddress
import socket
import threading
import urllib.parse
from dataclasses import dataclass

from mmtok.errors import MediaError

NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))  # RFC 6052, RFC 8215


@dataclass(frozen=True)
class Target:
    """A URL with its host replaced by the address that was checked, and what to send so the server (and TLS) still
    see the name."""

    url: str
    host_header: str
    extensions: dict[str, str]


def pinned(url: str, allow_private: bool, timeout_s: float) -> Target:
    """``url`` with its host resolved once and checked; the connection goes to that address."""
    parts = split(url)
    if parts.scheme not in ("http", "https"):
        raise MediaError(shown(url), f"only http and https URLs are read, not {parts.scheme or 'a bare path'}")
    if parts.username or parts.password:
        raise MediaError(shown(url), "a URL holding a user name or password: mmtok sends no credentials")
    host = parts.hostname
    if not host:
        raise MediaError(shown(url), "a URL with no host")
    explicit = _port(parts, url)
    port = explicit or (443 if parts.scheme == "https" else 80)
    address = checked_address(host, port, allow_private, url, timeout_s)
    literal = f"[{address}]" if ":" in address else address
    target = urllib.parse.urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
    name = f"[{host}]" if ":" in host else host
    host_header = name if explicit is None else f"{name}:{port}"
    return Target(target, host_header, {"sni_hostname": host} if parts.scheme == "https" else {})


def split(url: str) -> urllib.parse.SplitResult:
    try:
        return urllib.parse.urlsplit(url)
    except ValueError as e:
        raise MediaError(shown(url), f"not a valid URL ({e})") from None


def _port(parts: urllib.parse.SplitResult, url: str) -> int | None:
    try:
        return parts.port
    except ValueError:
        raise MediaError(shown(url), "not a valid URL (its port is not a number from 0 to 65535)") from None


def checked_address(host: str, port: int, allow_private: bool, url: str, timeout_s: float) -> str:
    """The first address ``host`` resolves to; every one it resolves to must be public unless ``allow_private``."""
    addresses = _resolve(host, port, url, timeout_s)
    if not allow_private:
        private = [a for a in addresses if not is_public(a)]
        if private:
            raise MediaError(
                shown(url),
                f"{host} resolves to {private[0]}, a loopback, private or link-local address: not read "
                "(a URL from a request body must not reach your own network; allow it with --allow-private)",
            )
    return addresses[0]


def _resolve(host: str, port: int, url: str, timeout_s: float) -> list[str]:
    """getaddrinfo, within ``timeout_s`` (it has no timeout of its own: a slow resolver is left behind)."""
    found: list[str] = []
    failed: list[str] = []

    def lookup() -> None:
        try:
            found.extend(info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as e:
            failed.append(getattr(e, "strerror", None) or str(e))

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(max(timeout_s, 0.0))
    if failed:
        raise MediaError(shown(url), f"cannot resolve {host}: {failed[0]}")
    if not found:
        raise MediaError(shown(url), f"cannot resolve {host} within {timeout_s:.3g} s")
    return found


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet: not loopback, private, link-local, reserved, site-local,
    multicast, and not one of those wrapped in IPv6 (IPv4-mapped, NAT64, 6to4)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _wrapped_ipv4(ip)
        if inner is not None:
            return is_public(str(inner))
        if ip.is_site_local:
            return False
    return ip.is_global and not ip.is_multicast


def _wrapped_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in network for network in NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def shown(url: str) -> str:
    """A URL as messages and tables show it: no user name or password, no query string (it may hold a signature)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return url.split("?", 1)[0].split("@")[-1][:200]
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))
