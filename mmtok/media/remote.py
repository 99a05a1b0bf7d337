"""Media behind an http(s) URL, measured as a file is: its first bytes (and last, for the end checks) by bounded
Range requests, never the whole unless its kind needs it and it is under the size cap.

Every read is bounded: a size cap, one deadline for everything (name resolution, connections, headers, body,
redirects; ``mmtok.media.deadline`` shuts the sockets down when it passes), at most a few redirects. Nothing
identifying is sent: no cookies (none are kept), no credentials (a URL holding a user name or password is refused),
no proxy settings or .netrc from the environment. The host is resolved once and the connection pinned to the address
that was checked (``mmtok.media.addresses``), so a name that resolves to a public address for the check and to a
private one for the connection (DNS rebinding) gets nowhere. A loopback, private, link-local or reserved address is
refused unless the policy allows it: a URL found in a request body is someone else's data, and must not make mmtok
reach the user's own network unasked. Messages show URLs without credentials or query strings.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmtok.errors import MediaError
from mmtok.media.addresses import is_public, pinned, shown

if TYPE_CHECKING:
    import httpx

__all__ = ["HEAD_BYTES", "RemoteFile", "UrlPolicy", "is_public", "shown"]
HEAD_BYTES = 64 * 1024  # enough for any image header mmtok parses, and a container's first boxes
TAIL_BYTES = 4096
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_EXTRA_RANGES = 8  # ranged reads after the first two (a JPEG whose frame header is far in)
OPERATION_TIMEOUT_S = 10.0  # any one connect or read, within the whole read's deadline


@dataclass(frozen=True)
class UrlPolicy:
    """How URLs may be read."""

    read: bool = True  # False: no URL is read (--offline); its part is left out of the quote, said
    allow_private: bool = False  # loopback / private / link-local addresses may be reached
    max_bytes: int = 64 * 1024 * 1024  # the most read from one URL (audio, video and documents are read whole)
    deadline_s: float = 10.0  # the whole read of one URL: resolution, redirects, headers and body
    max_redirects: int = 3


class RemoteFile:
    """An http(s) resource read by ranges: ``head`` (its first bytes), ``size`` (None when the server does not say),
    ``pread`` for other ranges (a :class:`mmtok.headers.RandomAccess`), ``read_all`` for the whole. Close it (or use
    ``with``) when done: its connections and its deadline's timer go with it."""

    def __init__(self, url: str, policy: UrlPolicy, *, asked: bool = False) -> None:
        from mmtok.media.deadline import DeadlineClient

        self.url = url
        self.shown = shown(url)  # for messages
        self.asked = asked  # the user named this URL: its own host may be private (its redirects still may not)
        self.policy = policy
        self._deadline = time.monotonic() + policy.deadline_s
        self._http = DeadlineClient(policy.deadline_s)
        self._extra_reads = 0
        self.final_url = url
        self.mime: str | None = None
        self.size: int | None = None
        self.ranges = False  # the server answers Range requests
        self.head = b""
        self._tail: tuple[int, bytes] | None = None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        """The last ``n`` bytes (one ranged read, kept for ``pread``); a server without ranges is read whole."""
        if self.size is not None and self.size <= len(self.head):
            return self.head[-n:]
        if self._tail is None and not self.ranges:
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
        cap = self.policy.max_bytes
        if self.size is not None and self.size > cap:
            raise MediaError(self.shown, f"{self.size:,} bytes: URLs are read up to {cap:,} bytes")
        status, _, body = self._get(self.final_url, None, cap + 1)
        if status != 200:
            raise MediaError(self.shown, f"HTTP {status} when read whole")
        if len(body) > cap:
            raise MediaError(self.shown, f"more than {cap:,} bytes: URLs are read up to that")
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
                raise MediaError(self.shown, f"HTTP {status} from {shown(url)}")
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

        target = pinned(url, self.policy.allow_private or (self.asked and url == self.url), self._left())
        headers = {"Host": target.host_header, "User-Agent": "mmtok", "Accept-Encoding": "identity"}
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        timeout = httpx.Timeout(min(OPERATION_TIMEOUT_S, self._left()))
        try:
            request = self._http.client.build_request("GET", target.url, headers=headers, timeout=timeout,
                                                      extensions=target.extensions)  # fmt: skip
            response = self._http.client.send(request, stream=True)
            try:
                body = b"" if redirects and response.status_code in REDIRECT_CODES else self._body(response, limit)
                return response.status_code, {k.lower(): v for k, v in response.headers.items()}, body
            finally:
                response.close()
        except httpx.HTTPError as e:
            if self._http.expired or isinstance(e, httpx.TimeoutException):  # the deadline shut the sockets down
                raise MediaError(self.shown, f"no whole answer within {self.policy.deadline_s:g} s") from None
            raise MediaError(self.shown, f"cannot read: {type(e).__name__}: {_safe(e, url)}") from None
        except httpx.InvalidURL as e:
            raise MediaError(self.shown, f"not a valid URL: {_safe(e, url)}") from None

    def _left(self) -> float:
        """Seconds left before the deadline; none left is the read's error."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise MediaError(self.shown, f"no whole answer within {self.policy.deadline_s:g} s")
        return left

    def _body(self, response: httpx.Response, limit: int) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_raw():
            chunks.append(chunk)
            size += len(chunk)
            if size >= limit:
                break
            self._left()
        return b"".join(chunks)[:limit]


def _safe(error: Exception, url: str) -> str:
    """An HTTP error's message without the URL it may quote (credentials, a signed query string)."""
    return str(error).replace(url, shown(url))


def _total_size(status: int, headers: dict[str, Any], got: int) -> int | None:
    if status == 206:
        total = headers.get("content-range", "").rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = headers.get("content-length", "")
    return int(length) if length.isdigit() else (got if got < HEAD_BYTES else None)
