"""Bad PDFs get one line each, in bounded time and memory: encrypted, damaged, truncated, oversized, a page-tree loop,
PDF bombs (page count, an inflated content stream past the child's memory or its deadline, text), a PDF header on
something else; JavaScript and embedded files are counted and ignored; the next file reads after a killed child."""

from __future__ import annotations

import io
import zlib

import pypdf
import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.eval.bench.documents import PageSpec, assemble, write_pdf
from mmtok.media import document, document_worker

runner = CliRunner()
CATALOG = b"<< /Type /Catalog /Pages 2 0 R >>"
PAGE = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"
GOOD = write_pdf([PageSpec(lines=("hello",))])


@pytest.fixture
def fresh_worker():
    """A test that changes the child's limits starts and leaves a fresh child."""
    document_worker.WORKER._stop()
    yield
    document_worker.WORKER._stop()


def _one_line(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(mmtok.MediaError) as caught:
        mmtok.load(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and "\n" not in message
    return caught.value.reason


def _inflating(megabytes: int, unit: bytes = b"q Q ") -> bytes:
    """A zlib stream that inflates to ``megabytes`` MiB of ``unit``: one fully flushed Deflate block of a MiB repeated
    (about 1 KB each), an empty final block, the Adler-32 of it all."""
    chunk = unit * ((1 << 20) // len(unit))
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    checksum = 1
    for _ in range(megabytes):
        checksum = zlib.adler32(chunk, checksum)
    return b"\x78\xda" + block * megabytes + b"\x03\x00" + checksum.to_bytes(4, "big")


def test_the_inflating_stream_is_valid_zlib():
    assert zlib.decompress(_inflating(3)) == b"q Q " * (3 << 18)


def _content_bomb(stream: bytes) -> bytes:
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>"
    body = b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream)
    return assemble([CATALOG, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", page, body])


def _encrypted(user: str, owner: str) -> bytes:
    writer = pypdf.PdfWriter()
    writer.append(io.BytesIO(GOOD))
    writer.encrypt(user, owner, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_password_protected_pdf_is_refused(tmp_path):
    assert "encrypted: it needs a password" in _one_line(tmp_path, "locked.pdf", _encrypted("secret", "owner"))


def test_an_encrypted_pdf_without_a_user_password_reads_and_says_so(tmp_path):
    path = tmp_path / "owner-only.pdf"
    path.write_bytes(_encrypted("", "owner"))
    doc = mmtok.load(path)
    assert doc.encrypted and doc.text(1) == "hello"
    assert doc.notes == ("encrypted (it opens without a password; Anthropic takes no encrypted PDFs)",)


def test_a_pdf_header_on_something_else_is_not_a_pdf(tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    reason = _one_line(tmp_path, "fake.pdf", b"%PDF-1.4\n" + png + b"\n%%EOF\n")
    assert "not one PDFium can read" in reason


def test_a_cut_short_pdf_is_truncated(tmp_path):
    assert "truncated: no %%EOF" in _one_line(tmp_path, "cut.pdf", GOOD[: len(GOOD) // 2])


def test_a_damaged_cross_reference_table_is_repaired(tmp_path):
    path = tmp_path / "xref.pdf"
    path.write_bytes(GOOD.replace(b"0000000000 65535 f", b"garbage garbage !!"))
    assert mmtok.load(path).text(1) == "hello"  # PDFium rebuilds the table from the objects, as viewers do


def test_a_page_tree_loop_is_refused(tmp_path):
    loop = assemble([CATALOG, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", b"<< /Type /Pages /Kids [2 0 R] >>"])
    assert "page 1 cannot be read" in _one_line(tmp_path, "loop.pdf", loop)
    selfish = assemble([CATALOG, b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>", PAGE])
    assert "cannot be read" in _one_line(tmp_path, "self.pdf", selfish)


def test_a_declared_page_count_is_not_believed(tmp_path):
    path = tmp_path / "count.pdf"
    path.write_bytes(assemble([CATALOG, b"<< /Type /Pages /Kids [3 0 R] /Count 2000000000 >>", PAGE]))
    assert mmtok.load(path).page_count == 1  # the pages the tree holds, not its /Count


def test_too_many_pages_is_a_pdf_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(document, "MAX_PAGES", 50)
    reason = _one_line(tmp_path, "many.pdf", write_pdf([PageSpec()] * 51))
    assert reason == "declares 51 pages, above the limit of 50 (a PDF-bomb guard)"


def test_too_much_text_is_a_text_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(document, "MAX_TEXT_CHARS", 1000)
    reason = _one_line(tmp_path, "text.pdf", write_pdf([PageSpec(lines=("y" * 80,) * 20)]))
    assert reason == "holds more than 1,000 characters of text (a text-bomb guard)"


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(document, "MAX_PDF_BYTES", 100)
    assert "PDFs above 100 bytes are not read" in _one_line(tmp_path, "big.pdf", GOOD)


def test_an_inflation_bomb_is_stopped_by_the_memory_limit_and_the_next_file_reads(tmp_path, fresh_worker):
    reason = _one_line(tmp_path, "bomb.pdf", _content_bomb(_inflating(800)))  # 800 MiB of content from 0.8 MB
    assert "more than its 1,024 MiB memory limit" in reason
    path = tmp_path / "after.pdf"
    path.write_bytes(GOOD)
    assert mmtok.load(path).text(1) == "hello"


def test_a_slow_file_is_stopped_at_the_deadline(tmp_path, monkeypatch, fresh_worker):
    monkeypatch.setattr(document, "READ_DEADLINE_S", 0.5)
    reason = _one_line(tmp_path, "slow.pdf", _content_bomb(_inflating(200)))  # parsing 200 MB takes seconds
    assert reason == "reading it took longer than 0.5 s (a PDF bomb or a damaged file): stopped"  # the deadline


def test_javascript_and_embedded_files_are_counted_and_ignored(tmp_path):
    names = b"/Names << /JavaScript << /Names [(x) 4 0 R] >> /EmbeddedFiles << /Names [(a.txt) 5 0 R] >> >>"
    catalog = b"<< /Type /Catalog /Pages 2 0 R /OpenAction 4 0 R %s >>" % names
    script = b"<< /S /JavaScript /JS (app.launchURL('http://127.0.0.1:9/');) >>"
    attached = b"<< /Type /Filespec /F (a.txt) /EF << /F 6 0 R >> >>"
    data = b"<< /Type /EmbeddedFile /Length 5 >>\nstream\nhello\nendstream"
    path = tmp_path / "active.pdf"
    path.write_bytes(assemble([catalog, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", PAGE, script, attached, data]))
    doc = mmtok.load(path)
    assert (doc.javascript_actions, doc.attachments, doc.page_count) == (1, 1, 1)
    assert doc.notes == (
        "holds 1 JavaScript action(s): ignored, never run",
        "holds 1 embedded file(s): ignored, never opened",
    )


def test_inspect_reports_each_bad_pdf_in_one_line_and_goes_on(tmp_path):
    (tmp_path / "a-good.pdf").write_bytes(GOOD)
    (tmp_path / "b-cut.pdf").write_bytes(GOOD[:200])
    result = runner.invoke(app, ["inspect", "--json", str(tmp_path)])
    assert result.exit_code == 1
    rows = [line for line in result.output.splitlines() if line.startswith("{")]
    assert '"kind": "document"' in rows[0] and "truncated" in rows[1]


def test_a_forked_process_reads_pdfs_through_its_own_child(tmp_path):
    import os

    path = tmp_path / "good.pdf"
    path.write_bytes(GOOD)
    mmtok.load(path)
    parent_child = document_worker.WORKER.proc.pid
    pid = os.fork()
    if pid == 0:  # as a DataLoader worker would
        ok = mmtok.load(path).text(1) == "hello" and document_worker.WORKER.proc.pid != parent_child
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert mmtok.load(path).text(1) == "hello" and document_worker.WORKER.proc.pid == parent_child
