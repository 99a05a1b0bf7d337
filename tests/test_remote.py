"""Media behind URLs, read as files are, from a server the test starts on 127.0.0.1: bounded Range reads, redirects,
deadlines, and the private-address policy. No other network."""

from __future__ import annotations

import io

import PIL.Image
import pytest

from mmtok.budgets.pricing import image_tokens, price_request
from mmtok.errors import MediaError
from mmtok.media.remote import RemoteFile, UrlPolicy, is_public
from mmtok.request import Policy
from mmtok.request.measure import Copies, load_url
from tests.loopback import serving

LOCAL = Policy(urls=UrlPolicy(allow_private=True, deadline_s=5))


@pytest.fixture
def site(tmp_path, samples):
    (tmp_path / "cat.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    big = PIL.Image.effect_noise((1280, 8000), 60).convert("RGB")  # a tall page, ~3 MB as PNG
    out = io.BytesIO()
    big.save(out, "PNG", compress_level=1)
    (tmp_path / "page.png").write_bytes(out.getvalue())
    (tmp_path / "cut.png").write_bytes(out.getvalue()[:-5000])
    (tmp_path / "speech.wav").write_bytes((samples / "speech.wav").read_bytes())
    return tmp_path


def _body(url: str) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}}]}]}  # fmt: skip


def test_an_image_url_is_measured_from_two_ranged_reads(site):
    with serving(site) as (base, seen):
        quote = price_request(_body(f"{base}/page.png"), at="2026-12-01", policy=LOCAL)
    assert quote.complete and quote.tokens("image") == image_tokens(1280, 8000, "gpt-4o", "high")
    ranges = [s.get("range") for s in seen]
    assert ranges == ["bytes=0-65535", "bytes=2965062-2969157"] or (
        len(ranges) == 2 and ranges[0] == "bytes=0-65535" and ranges[1].startswith("bytes=")
    )  # the head, then the last 4 KiB for the end check: never the 3 MB


def test_a_cut_short_image_behind_a_url_is_refused(site):
    with serving(site) as (base, _):
        (missing,) = price_request(_body(f"{base}/cut.png"), at="2026-12-01", policy=LOCAL).missing
    assert f"{base}/cut.png" in missing and "cut short" in missing and "IEND" in missing


def test_a_server_without_ranges_is_read_whole_within_the_cap(site):
    with serving(site, ranges=False) as (base, _):
        quote = price_request(_body(f"{base}/page.png"), at="2026-12-01", policy=LOCAL)
        small_cap = Policy(urls=UrlPolicy(allow_private=True, max_bytes=1_000_000))
        (missing,) = price_request(_body(f"{base}/page.png"), at="2026-12-01", policy=small_cap).missing
    assert quote.complete and quote.tokens("image") == image_tokens(1280, 8000, "gpt-4o", "high")
    assert "URLs are read up to 1,000,000 bytes" in missing


def test_audio_behind_a_url_is_read_whole_and_loaded(site, samples):
    import mmtok

    copies = Copies()
    with serving(site) as (base, _):
        audio = load_url(f"{base}/speech.wav", LOCAL, copies)
    copies.close()
    assert audio.kind == "audio" and audio.duration_s == pytest.approx(mmtok.load(samples / "speech.wav").duration_s)


def test_a_url_in_a_body_may_not_reach_a_private_address_unless_allowed(site):
    with serving(site) as (base, seen):
        (missing,) = price_request(_body(f"{base}/cat.jpg"), at="2026-12-01").missing
        assert seen == []  # refused before connecting
    assert "resolves to 127.0.0.1, a loopback, private or link-local address: not read" in missing
    assert "--allow-private" in missing


def test_a_url_the_user_names_may_be_local_but_its_redirects_may_not_leave_for_another_private_host(site):
    asked = Policy(urls=UrlPolicy(deadline_s=5))
    with serving(site) as (base, _):
        copies = Copies()
        image = load_url(f"{base}/cat.jpg", asked, copies)
        assert (image.width, image.height) == (451, 300)
        with pytest.raises(MediaError, match=r"127\.0\.0\.2, a loopback, private or link-local address"):
            load_url(f"{base}/away/127.0.0.2:9/cat.jpg", asked, copies)
        copies.close()


def test_redirects_are_followed_a_few_times_only(site):
    with serving(site) as (base, seen):
        assert price_request(_body(f"{base}/to/cat.jpg"), at="2026-12-01", policy=LOCAL).complete
        (missing,) = price_request(_body(f"{base}/loop/0"), at="2026-12-01", policy=LOCAL).missing
    assert "more than 3 redirects" in missing
    assert len([s for s in seen if s["path"].startswith("/loop/")]) == 4


def test_a_server_that_drips_bytes_is_stopped_at_the_deadline(site):
    policy = Policy(urls=UrlPolicy(allow_private=True, deadline_s=1.0))
    with serving(site) as (base, _):  # 600 bytes, one every 50 ms: 30 s unless the deadline ends the read
        (missing,) = price_request(_body(f"{base}/drip"), at="2026-12-01", policy=policy).missing
    assert missing.endswith("/drip: no whole answer within 1 s")


def test_headers_sent_a_byte_at_a_time_are_stopped_at_the_deadline(site):
    policy = Policy(urls=UrlPolicy(allow_private=True, deadline_s=1.0))
    with serving(site) as (base, _):  # each byte comes within any per-read timeout: only the deadline ends it
        (missing,) = price_request(_body(f"{base}/slowheaders"), at="2026-12-01", policy=policy).missing
    assert missing.endswith("/slowheaders: no whole answer within 1 s")


def test_urls_that_do_not_parse_are_one_line_each():
    for url, reason in (("http://127.0.0.1:99999/x.png", "its port is not a number from 0 to 65535"),
                        ("http://[::1/x.png", "not a valid URL")):  # fmt: skip
        (missing,) = price_request(_body(url), at="2026-12-01", policy=LOCAL).missing
        assert reason in missing, missing


def test_nothing_identifying_is_sent(site):
    with serving(site) as (base, seen):
        price_request(_body(f"{base}/page.png"), at="2026-12-01", policy=LOCAL)
        with_user = base.replace("http://", "http://user:secret@")
        (missing,) = price_request(_body(f"{with_user}/cat.jpg"), at="2026-12-01", policy=LOCAL).missing
    assert "holding a user name or password: mmtok sends no credentials" in missing and "secret" not in missing
    for request in seen:
        assert not {"cookie", "authorization", "proxy-authorization"} & set(request), request
        assert request["user-agent"] == "mmtok"


def test_public_addresses_are_told_from_private_ones():
    assert is_public("8.8.8.8") and is_public("2001:4860:4860::8888") and is_public("64:ff9b::808:808")
    for address in (
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "100.64.0.1",
        "224.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::a00:1",
        "2002:a9fe:a9fe::1",
        "fec0::1",
    ):  # fmt: skip  NAT64, 6to4 and site-local wrap private ones
        assert not is_public(address), address


def test_offline_reads_no_url(site):
    with serving(site) as (base, seen):
        policy = Policy(urls=UrlPolicy(read=False))
        (missing,) = price_request(_body(f"{base}/cat.jpg"), at="2026-12-01", policy=policy).missing
    assert "not read (URLs are off: --offline)" in missing and seen == []


def test_ranged_reads_of_a_remote_file_are_bounded(site):
    with serving(site) as (base, seen), RemoteFile(f"{base}/page.png", UrlPolicy(allow_private=True)) as remote:
        for offset in range(0, 2_000_000, 100_000):
            remote.pread(16, offset)
    assert len(seen) == 1 + 8  # the head, then at most 8 more ranges; past that, reads come back short
