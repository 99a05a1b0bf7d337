"""``mmtok proxy``: a local HTTP proxy in front of the OpenAI, Anthropic and Gemini APIs that prices every call
before it is sent, refuses those over a limit, passes the answer back untouched (streams chunk by chunk) and records
predicted against billed tokens in a ledger (:mod:`mmtok.budgets.ledger`), from which :mod:`mmtok.budgets.calibrate`
learns each model's real rule."""

from mmtok.budgets.proxy.app import Proxy, create_app
from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.server import serve

__all__ = ["Proxy", "ProxyConfig", "create_app", "serve"]
