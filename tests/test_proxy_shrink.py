"""--shrink: a call's photo replaced in flight by a cheaper rendition that keeps the bar, the upstream billed for
what was sent, the saving said in a header and recorded."""

from __future__ import annotations

from decimal import Decimal

from mmtok.budgets.ledger import open_ledger
from tests.test_proxy import image_message, openai_client
from tests.upstream import Upstream, make_app, running_proxy, serve


def test_a_photo_is_shrunk_in_flight_and_the_saving_recorded(tmp_path):
    state, ledger = Upstream(), tmp_path / "calls.sqlite"
    with serve(make_app(state)) as url, running_proxy(url, ledger, shrink=True, keep=("ssim>=0.85",)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="gpt-4o", messages=image_message((1600, 1200))
        )
        assert raw.parse().choices[0].message.content
        ((width, height, _),) = state.requests[-1]["bill"].images
    assert width * height < 1600 * 1200  # the upstream got the smaller rendition
    assert "part(s) shrunk" in raw.headers["x-mmtok-shrink"]
    (row,) = open_ledger(ledger).records()
    assert row.saved_cost > Decimal(0) and row.shrink["input_tokens_after"] < row.shrink["input_tokens_before"]
    assert row.shrink["parts"][0]["measures"]["ssim"] >= 0.85
    assert row.predicted_input == row.shrink["input_tokens_after"]  # the prediction is of what was sent


def test_a_call_without_media_or_count_calls_are_not_shrunk(tmp_path):
    state, ledger = Upstream(), tmp_path / "calls.sqlite"
    with serve(make_app(state)) as url, running_proxy(url, ledger, shrink=True) as proxy:
        openai_client(proxy).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        openai_client(proxy).responses.input_tokens.count(model="gpt-4o", input="hi")
    assert all(r.shrink is None and "shrink" not in r.message for r in open_ledger(ledger).records())
