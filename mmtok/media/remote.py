"""Media behind an http(s) URL, measured as a file is: its first bytes (and last, for the end checks) by bounded
Range requests, never the whole unless its kind needs it and it is under the size cap.

Every read is bounded: a size cap, an overall deadline, at most a few redirects. Nothing identifying is sent: no
cookies, no credentials (a URL holding a user name or password is refused), no proxy settings or .netrc from the
environment. The host is resolved once and the connection pinned to the address that was checked, so a name that
resolves to a public address for the check and to a private one for the connection (DNS rebinding) gets nowhere.
A loopback, private, link-local or reserved address is refused unless the policy allows it: a URL found in a
request body is someone else's data, and must not make mmtok reach the user's own network unasked.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mmtok.errors import MediaError

if TYPE_CHECKING:
    import httpx

HEAD_BYTES = 64 * 1024  # enough for any image header mmtok parses, and a container's first boxes
TAIL_BYTES = 4096
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_EXTRA_RANGES = 8  # ranged reads after the first two (a JPEG whose frame header is far in)


@dataclass(frozen=True)
class UrlPolicy:
    """How URLs may be read."""

    read: bool = True  # False: no URL is read (--offline); its part is left out of the quote, said
    allow_private: bool = False  # loopback / private / link-local addresses may be reached
    max_bytes: int = 64 * 1024 * 1024  # the most read from one URL (audio, video and documents are read whole)
    deadline_s: float = 10.0  # the whole read of one URL, redirects included
    max_redirects: int = 3


class RemoteFile:
    """An http(s) resource read by ranges: ``head`` (its first bytes), ``size`` (None when the server does not say),
    ``pread`` for other ranges (a :class:`mmtok.headers.RandomAccess`), ``read_all`` for the whole."""

    def __init__(self, url: str, policy: UrlPolicy, client: httpx.Client | None = None, *, asked: bool = False) -> None:
        self.url = url
        self.shown = shown(url)  # for messages
        self.asked = asked  # the user named this URL: its own host may be private (its redirects still may not)
        self.policy = policy
        self._client = client
        self._deadline = time.monotonic() + policy.deadline_s
        self._extra_reads = 0
        self.final_url = url
        self.mime: str | None = None
        self.size: int | None = None
        self.ranges = False  # the server answers Range requests
        self.head = b""
        self._tail: tuple[int, bytes] | None = None
        self._open()

    # --- reads
    def pread(self, n: int, offset: int) -> bytes:
        end = offset + n
        if end <= len(self.head):
            return self.head[offset:end]
        if self._tail is not None and offset >= self._tail[0]:
            start = offset - self._tail[0]
            return self._tail[1][start : start + n]
        if not self.ranges or self._extra_reads >= MAX_EXTRA_RANGES or n > self.policy.max_bytes:
            return self.head[offset:end]  # short: the caller treats it as an unreadable header
        self._extra_reads += 1
        return self._get_range(offset, end - 1)

    def tail(self, n: int = TAIL_BYTES) -> bytes:
        """The last ``n`` bytes (one ranged read, kept for ``pread``)."""
        if self.size is not None and self.size <= len(self.head):
            return self.head[-n:]
        if self._tail is None and not self.ranges:  # the server sends whole files only: read it, within the cap
            self.head = self.read_all()
            self.size = len(self.head)
            return self.head[-n:]
        if self._tail is None:
            if self.size is None:
                raise MediaError(self.shown, "the server answers Range requests but does not say the file's size")
            start = max(0, self.size - n)
            self._tail = (start, self._get_range(start, self.size - 1))
        return self._tail[1]

    def read_all(self) -> bytes:
        """The whole resource, if it is within the size cap."""
        if self.size is not None and self.size <= len(self.head):
            return self.head
        if self.size is not None and self.size > self.policy.max_bytes:
            raise MediaError(self.shown, f"{self.size:,} bytes: URLs are read up to {self.policy.max_bytes:,} bytes")
        _, _, body = self._get(self.final_url, None, self.policy.max_bytes + 1)
        if len(body) > self.policy.max_bytes:
            raise MediaError(self.shown, f"more than {self.policy.max_bytes:,} bytes: URLs are read up to that")
        return body

    # --- requests
    def _open(self) -> None:
        url = self.url
        for _ in range(self.policy.max_redirects + 1):
            status, headers, body = self._get(url, (0, HEAD_BYTES - 1), HEAD_BYTES, redirects=True)
            if status in REDIRECT_CODES:
                location = headers.get("location")
                if not location:
                    raise MediaError(self.shown, f"HTTP {status} redirect without a Location")
                url = urllib.parse.urljoin(url, location)
                continue
            if status not in (200, 206):
                raise MediaError(self.shown, f"HTTP {status} from {_host_of(url)}")
            self.final_url = url
            self.mime = (headers.get("content-type") or "").split(";")[0].strip().lower() or None
            self.ranges = status == 206
            self.size = _total_size(status, headers, len(body))
            self.head = body
            return
        raise MediaError(self.shown, f"more than {self.policy.max_redirects} redirects")

    def _get_range(self, first: int, last: int) -> bytes:
        status, _, body = self._get(self.final_url, (first, last), last - first + 1)
        if status != 206:
            raise MediaError(self.shown, f"HTTP {status} to a Range request the server had answered before")
        return body

    def _get(
        self, url: str, byte_range: tuple[int, int] | None, limit: int, redirects: bool = False
    ) -> tuple[int, dict[str, str], bytes]:
        import httpx

        target = _pinned(url, self.policy.allow_private or (self.asked and url == self.url))
        headers = {"Host": target.host_header, "User-Agent": "mmtok", "Accept-Encoding": "identity"}
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        client = self._client or _client()
        try:
            request = client.build_request("GET", target.url, headers=headers, extensions=target.extensions)
            response = client.send(request, stream=True)
            try:
                body = b"" if redirects and response.status_code in REDIRECT_CODES else self._body(response, limit)
                return response.status_code, {k.lower(): v for k, v in response.headers.items()}, body
            finally:
                response.close()
        except httpx.TimeoutException:
            raise MediaError(self.shown, f"no answer within {self.policy.deadline_s:g} s") from None
        except httpx.HTTPError as e:
            raise MediaError(self.shown, f"cannot read: {type(e).__name__}: {e}") from None

    def _body(self, response: httpx.Response, limit: int) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_raw():
            chunks.append(chunk)
            size += len(chunk)
            if size >= limit:
                break
            if time.monotonic() > self._deadline:
                raise MediaError(self.shown, f"still sending after {self.policy.deadline_s:g} s: the read was stopped")
        return b"".join(chunks)[:limit]


def _client() -> httpx.Client:
    import httpx

    # trust_env=False: no proxies, no .netrc credentials from the environment; no cookie jar is kept between reads
    return httpx.Client(trust_env=False, follow_redirects=False, timeout=httpx.Timeout(10.0))


def _total_size(status: int, headers: dict[str, str], got: int) -> int | None:
    if status == 206:
        total = headers.get("content-range", "").rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = headers.get("content-length", "")
    return int(length) if length.isdigit() else (got if got < HEAD_BYTES else None)


@dataclass(frozen=True)
class _Target:
    url: str  # with the checked address in place of the host name
    host_header: str
    extensions: dict[str, str]


def _pinned(url: str, allow_private: bool) -> _Target:
    """``url`` with its host resolved once and checked; the connection goes to that address."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise MediaError(shown(url), f"only http and https URLs are read, not {parts.scheme or 'a bare path'}")
    if parts.username or parts.password:
        raise MediaError(_host_of(url), "a URL holding a user name or password: mmtok sends no credentials")
    host = parts.hostname
    if not host:
        raise MediaError(shown(url), "a URL with no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = _checked_address(host, port, allow_private, url)
    literal = f"[{address}]" if ":" in address else address
    pinned = urllib.parse.urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
    host_header = host if parts.port is None else f"{host}:{port}"
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return _Target(pinned, host_header, extensions)


def _checked_address(host: str, port: int, allow_private: bool, url: str) -> str:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise MediaError(shown(url), f"cannot resolve {host}: {getattr(e, 'strerror', None) or e}") from None
    addresses = [info[4][0] for info in found]
    if not allow_private:
        private = [a for a in addresses if not is_public(a)]
        if private:
            raise MediaError(
                url,
                f"{host} resolves to {private[0]}, a loopback, private or link-local address: not read "
                "(a URL from a request body must not reach your own network; allow it with --allow-private)",
            )
    return addresses[0]


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet (not loopback, private, link-local, reserved, ...)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def shown(url: str) -> str:
    """A URL as messages show it: no user name or password, no query string (which may hold a signature)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))


def _host_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}"
