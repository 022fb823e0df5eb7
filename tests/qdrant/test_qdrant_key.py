"""A Qdrant server's API key reaches the server on every path, and no message shows it: the key
given, else ``$CTXEMB_QDRANT_API_KEY`` (core's ``connecting.server_key``), through
``connect``, ``ctxemb eval --via qdrant`` and each framework's Qdrant store.

The server is a small HTTP listener on 127.0.0.1 that records each request's ``api-key`` header
and answers ``GET /collections`` (what ``connect`` asks) and nothing else (404): every path
fails soon after it connects, having shown what it sent."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import ctxemb_qdrant
from ctxemb_core.cli import main
from ctxemb_core.index.connecting import server_key
from ctxemb_qdrant import cli as qdrant_cli
from ctxemb_qdrant._store import API_KEY_ENV

KEY = "s3cret-qdrant-key-47"

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")


class Listener:
    """A listener recording ``(method, path, api-key header)`` of each request."""

    def __init__(self) -> None:
        seen: list[tuple[str, str, str | None]] = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                if size:
                    self.rfile.read(size)
                seen.append((self.command, self.path, self.headers.get("api-key")))
                if self.command == "GET" and self.path.split("?")[0] == "/collections":
                    code, body = 200, {"result": {"collections": []}, "status": "ok", "time": 0}
                else:
                    code, body = 404, {"status": {"error": "Not found here"}, "time": 0}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def keys(self) -> set[str | None]:
        return {key for _, _, key in self.seen}


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    yield found
    found.server.shutdown()
    found.server.server_close()


def test_the_key_given_else_the_environment_s(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert server_key(None, API_KEY_ENV) is None
    assert server_key("given", API_KEY_ENV) == "given"
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert server_key(None, API_KEY_ENV) == KEY and server_key("given", API_KEY_ENV) == "given"
    assert qdrant_cli.API_KEY_ENV == API_KEY_ENV  # the CLI names the same variable


def test_connect_sends_the_environment_s_key_or_the_one_given(listener, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, KEY)
    ctxemb_qdrant.connect(url=listener.url).close()
    assert listener.keys() == {KEY}
    listener.seen.clear()
    ctxemb_qdrant.connect(url=listener.url, api_key="another").close()
    assert listener.keys() == {"another"}


@pytest.mark.parametrize("via", ["qdrant", "langchain-qdrant", "llamaindex-qdrant"])
def test_every_eval_path_sends_the_key_and_shows_it_nowhere(listener, monkeypatch, data_dir, via):
    monkeypatch.setenv(API_KEY_ENV, KEY)
    out, err = io.StringIO(), io.StringIO()
    args = ["eval", "--via", via, "--qdrant-url", listener.url, "--data", str(data_dir / "scifact")]
    with redirect_stdout(out), redirect_stderr(err):
        code = main(args)
    assert code != 0  # the listener keeps no collection
    assert len(listener.seen) > 1 and listener.keys() == {KEY}
    assert KEY not in out.getvalue() + err.getvalue()


def test_haystack_s_document_store_is_given_the_same_key(listener, monkeypatch):
    pytest.importorskip("haystack_integrations.document_stores.qdrant")
    from ctxemb_core.testing.conformance import tiny_embedder
    from ctxemb_haystack._eval_qdrant import QdrantStores

    monkeypatch.setenv(API_KEY_ENV, KEY)
    stores = QdrantStores(tiny_embedder(), "docs", url=listener.url)
    store = stores.make(False)
    assert store.api_key.resolve_value() == KEY
    assert KEY not in json.dumps(store.to_dict())  # the variable's name, not the key
    with pytest.raises(Exception) as err:  # its own client, on the listener
        store.count_documents()
    assert KEY not in str(err.value)
    assert listener.keys() == {KEY}


def test_a_server_s_head_is_one_request(listener, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    client = ctxemb_qdrant.connect(url=listener.url)
    listener.seen.clear()
    assert ctxemb_qdrant.QdrantDriver(client, "docs").head() is None  # 404: no collection
    assert [(method, path) for method, path, _ in listener.seen] == [("GET", "/collections/docs")]


def test_a_key_written_into_the_url_is_not_shown_either():
    import socket

    from ctxemb_core.errors import InvalidInputError, StoreUnavailableError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreUnavailableError) as err:
        ctxemb_qdrant.connect(url=f"http://127.0.0.1:{port}/{KEY}", api_key=KEY)
    assert KEY not in str(err.value) and "Qdrant server at" in str(err.value)
    with pytest.raises(InvalidInputError) as err:
        ctxemb_qdrant.connect(url="http://bad host:6333", api_key=KEY)
    assert "is not a Qdrant server address" in str(err.value)
