"""A file server on 127.0.0.1 that behaves as the servers mmtok reads URLs from: Range requests (206), redirects,
and the hostile ones (endless redirects, a server that drips bytes). It records each request's headers, so tests can
check that nothing identifying was sent."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Files(http.server.BaseHTTPRequestHandler):
    folder: Path
    seen: list[dict[str, str]]
    ranges = True

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        if self.path.startswith("/loop/"):
            n = int(self.path.rsplit("/", 1)[1])
            return self._redirect(f"/loop/{n + 1}")
        if self.path.startswith("/to/"):
            return self._redirect(self.path[len("/to") :])
        if self.path.startswith("/away/"):  # to a literal address given in the path, e.g. /away/127.0.0.2:PORT/x
            return self._redirect("http://" + self.path[len("/away/") :])
        if self.path == "/drip":
            return self._drip()
        if self.path == "/slowheaders":
            return self._slow_headers()
        target = self.folder / self.path.lstrip("/").split("?")[0]
        if not target.is_file():
            self.send_response(404)
            self.end_headers()
            return
        self._send(target.read_bytes())

    def _send(self, data: bytes) -> None:
        first, last = 0, len(data) - 1
        asked = self.headers.get("Range", "")
        if self.ranges and asked.startswith("bytes="):
            start, _, end = asked[6:].partition("-")
            if start == "":  # a suffix: the last N bytes
                first = max(0, len(data) - int(end))
            else:
                first, last = int(start), min(int(end or last), last)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Set-Cookie", "session=abc")  # a cookie that must never come back
        self.end_headers()
        self.wfile.write(data[first : last + 1])

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _slow_headers(self) -> None:
        """A status line, then a header one byte every 0.2 s: no single read ever waits long."""
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(300):
                self.wfile.write(b"a")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def _drip(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 20))
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b"\xff")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass


@contextmanager
def serving(folder: Path, ranges: bool = True) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(base URL, the requests seen) of a server on 127.0.0.1 serving ``folder``, for the block's duration."""
    seen: list[dict[str, str]] = []
    handler = type("Handler", (Files,), {"folder": folder, "seen": seen, "ranges": ranges})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
