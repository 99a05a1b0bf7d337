"""The child process that reads PDFs with PDFium, and the calls that use it (``scan``, ``render``).

One child serves every request of this process, one at a time, and is kept between them (starting one costs about
a quarter of a second). It sets its own limits before PDFium is loaded: ``RLIMIT_AS`` (address space), no core
files, no file writes. Each request has a deadline; a child that misses it, crashes, or runs out of memory is
killed and the request fails with one line naming the file, and the next request starts a fresh child. The child
opens only the path it is given, after checking that it is the regular file (device and inode) the parent
checked.

Messages are length-prefixed JSON on the child's stdin and stdout; a rendered page follows its JSON reply as raw
RGB bytes.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mmtok.errors import MediaError

LENGTH = struct.Struct(">Q")
MAX_REPLY_BYTES = 1 << 30  # a reply larger than this is the child misbehaving
RESTART_AFTER_REQUESTS = 500  # a fresh child now and then, so nothing PDFium keeps between files builds up


class _Worker:
    """The parent's end: the child, started on the first request and after any failure."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.served = 0

    def request(self, path: Path, message: dict[str, Any], deadline_s: float) -> tuple[dict[str, Any], bytes]:
        with self.lock:
            proc = self._running()
            try:
                _write_frame(proc, json.dumps(message).encode())
                reply = json.loads(self._read_frame(proc, path, time.monotonic() + deadline_s, deadline_s))
                raw = b""
                if reply.get("raw"):
                    raw = self._read_frame(proc, path, time.monotonic() + deadline_s, deadline_s)
            except MediaError:
                raise
            except (OSError, ValueError) as e:  # a broken pipe, a garbled reply
                self._stop()
                raise MediaError(path, f"the PDF reader failed: {e}") from None
            self.served += 1
            if "error" in reply:
                raise MediaError(path, reply["error"])
            return reply, raw

    def _running(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and (self.proc.poll() is not None or self.served >= RESTART_AFTER_REQUESTS):
            self._stop()
        if self.proc is None:
            from mmtok.media.document import WORKER_MEMORY_BYTES

            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "mmtok.media.document_worker", str(WORKER_MEMORY_BYTES)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self.served = 0
        return self.proc

    def _read_frame(self, proc: subprocess.Popen[bytes], path: Path, deadline: float, limit_s: float) -> bytes:
        head = self._read_exact(proc, path, LENGTH.size, deadline, limit_s)
        (size,) = LENGTH.unpack(head)
        if size > MAX_REPLY_BYTES:
            self._stop()
            raise MediaError(path, f"the PDF reader sent a {size:,}-byte reply")
        return self._read_exact(proc, path, size, deadline, limit_s)

    def _read_exact(
        self, proc: subprocess.Popen[bytes], path: Path, size: int, deadline: float, limit_s: float
    ) -> bytes:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        chunks: list[bytes] = []
        left = size
        while left:
            wait = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(0.0, wait))[0] if wait > 0 else []
            if not ready:
                self._stop()
                raise MediaError(
                    path, f"reading it took longer than {limit_s:g} s (a PDF bomb or a damaged file): stopped"
                )
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise MediaError(path, self._died())
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _died(self) -> str:
        """Why the child stopped, in words (it is then gone)."""
        from mmtok.media.document import WORKER_MEMORY_BYTES

        assert self.proc is not None
        code = self.proc.wait()
        self.proc = None
        limit = f"{WORKER_MEMORY_BYTES >> 20:,} MiB"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"the PDF reader stopped on it ({name}): more than its {limit} memory limit, or damaged data"
        return f"the PDF reader exited on it (status {code}): more than its {limit} memory limit, or damaged data"

    def _stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc = None


def _write_frame(proc: subprocess.Popen[bytes], payload: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(LENGTH.pack(len(payload)) + payload)
    proc.stdin.flush()


WORKER = _Worker()
atexit.register(WORKER._stop)
# A forked process (a DataLoader worker) starts its own child: the pipes it inherits are its parent's.
os.register_at_fork(after_in_child=WORKER.__init__)


def scan(path: Path, file_id: tuple[int, int], max_pages: int, max_text_chars: int) -> dict[str, Any]:
    """Every page's size, rotation and text, the PDF version, encryption, JavaScript and attachment counts."""
    from mmtok.media.document import READ_DEADLINE_S

    message = {"op": "scan", "path": os.fspath(path), "id": list(file_id), "pages": max_pages, "text": max_text_chars}
    return WORKER.request(path, message, READ_DEADLINE_S)[0]


def render(path: Path, index: int, width: int, height: int) -> bytes:
    """Page ``index`` (0-based) as ``width`` x ``height`` RGB bytes, row after row."""
    from mmtok.media.document import READ_DEADLINE_S

    st = os.stat(path)
    message = {"op": "render", "path": os.fspath(path), "id": [st.st_dev, st.st_ino], "index": index}
    message.update(width=width, height=height)
    return WORKER.request(path, message, READ_DEADLINE_S)[1]


def extract(path: Path, indices: list[int]) -> bytes:
    """A new PDF of the pages at ``indices`` (0-based, in that order), as PDFium writes it."""
    from mmtok.media.document import READ_DEADLINE_S

    st = os.stat(path)
    message = {"op": "extract", "path": os.fspath(path), "id": [st.st_dev, st.st_ino], "indices": indices}
    return WORKER.request(path, message, READ_DEADLINE_S)[1]


# ------------------------------------------------------------------------------------------------------ the child
_ERRORS = {  # FPDF_GetLastError codes
    2: "cannot be opened by the PDF reader",
    3: "starts like a PDF but is not one PDFium can read (damaged, or a PDF header on something else)",
    4: "encrypted: it needs a password to open (providers take no encrypted PDFs)",
    5: "encrypted with a security handler PDFium does not support",
    6: "a page cannot be read (damaged page tree or content)",
}


def _limit_self(memory_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def _open(message: dict[str, Any]) -> Any:
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    path = message["path"]
    st = os.stat(path)
    if [st.st_dev, st.st_ino] != message["id"] or not (st.st_mode & 0o170000 == 0o100000):
        raise _Refused("changed while it was being read")
    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError:
        raise _Refused(_ERRORS.get(raw.FPDF_GetLastError(), "cannot be read as a PDF")) from None


class _Refused(Exception):
    """A file the child will not or cannot read; the message is the reason, for people."""


def _scan(message: dict[str, Any]) -> dict[str, Any]:
    import pypdfium2.raw as raw

    pdf = _open(message)
    try:
        count = len(pdf)
        if count > message["pages"]:
            raise _Refused(f"declares {count:,} pages, above the limit of {message['pages']:,} (a PDF-bomb guard)")
        pages = []
        chars = 0
        for index in range(count):
            page = _page(pdf, index)
            width, height = page.get_size()
            textpage = page.get_textpage()
            text = textpage.get_text_range().replace("\r\n", "\n")
            chars += len(text)
            if chars > message["text"]:
                raise _Refused(f"holds more than {message['text']:,} characters of text (a text-bomb guard)")
            pages.append((width, height, page.get_rotation(), text))
            textpage.close()
            page.close()
        version = pdf.get_version()
        return {
            "version": f"{version // 10}.{version % 10}" if version else "",
            "encrypted": raw.FPDF_GetSecurityHandlerRevision(pdf.raw) != -1,
            "javascript": max(0, raw.FPDFDoc_GetJavaScriptActionCount(pdf.raw)),
            "attachments": max(0, pdf.count_attachments()),
            "pages": pages,
        }
    finally:
        pdf.close()


def _page(pdf: Any, index: int) -> Any:
    import pypdfium2 as pdfium

    try:
        page = pdf[index]
    except pdfium.PdfiumError:
        raise _Refused(f"page {index + 1} cannot be read (damaged page tree or content)") from None
    width, height = page.get_size()
    if not (width > 0 and height > 0):
        raise _Refused(f"page {index + 1} has no size ({width:g} x {height:g} points)")
    return page


def _render(message: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    import ctypes

    import pypdfium2.raw as raw

    width, height = message["width"], message["height"]
    pdf = _open(message)
    try:
        page = _page(pdf, message["index"])
        bitmap = raw.FPDFBitmap_CreateEx(width, height, raw.FPDFBitmap_BGR, None, 0)
        if not bitmap:
            raise _Refused(f"no memory for a {width}x{height} page image")
        try:
            raw.FPDFBitmap_FillRect(bitmap, 0, 0, width, height, 0xFFFFFFFF)
            flags = raw.FPDF_ANNOT | raw.FPDF_REVERSE_BYTE_ORDER  # annotations' appearance; RGB byte order
            raw.FPDF_RenderPageBitmap(bitmap, page.raw, 0, 0, width, height, 0, flags)
            stride = raw.FPDFBitmap_GetStride(bitmap)
            buffer = ctypes.string_at(raw.FPDFBitmap_GetBuffer(bitmap), stride * height)
        finally:
            raw.FPDFBitmap_Destroy(bitmap)
        row = width * 3
        pixels = buffer if stride == row else b"".join(buffer[y * stride : y * stride + row] for y in range(height))
        page.close()
        return {"raw": True}, pixels
    finally:
        pdf.close()


def _extract(message: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    import io

    import pypdfium2 as pdfium

    source = _open(message)
    try:
        out = pdfium.PdfDocument.new()
        try:
            out.import_pages(source, message["indices"])
            buffer = io.BytesIO()
            out.save(buffer)  # into memory: the child may write no file
        finally:
            out.close()
    except pdfium.PdfiumError as e:
        raise _Refused(f"its pages cannot be copied into a new PDF: {e}") from None
    finally:
        source.close()
    return {"raw": True}, buffer.getvalue()


def _serve(memory_bytes: int) -> None:
    _limit_self(memory_bytes)
    import pypdfium2  # noqa: F401 - loaded once, under the limits

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(LENGTH.size)
        if len(head) < LENGTH.size:
            return  # the parent is gone
        message = json.loads(stdin.read(LENGTH.unpack(head)[0]))
        raw_bytes = b""
        try:
            if message["op"] == "scan":
                reply = _scan(message)
            elif message["op"] == "extract":
                reply, raw_bytes = _extract(message)
            else:
                reply, raw_bytes = _render(message)
        except _Refused as e:
            reply = {"error": str(e)}
        except MemoryError:
            reply = {"error": f"needs more than the PDF reader's {memory_bytes >> 20:,} MiB memory limit"}
        except OSError as e:
            reply = {"error": f"cannot be read: {e.strerror}"}
        payload = json.dumps(reply, ensure_ascii=False).encode()
        stdout.write(LENGTH.pack(len(payload)) + payload)
        if raw_bytes:
            stdout.write(LENGTH.pack(len(raw_bytes)) + raw_bytes)
        stdout.flush()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
