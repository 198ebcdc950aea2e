"""`serve verify` ends every request by its deadline and reads bounded answers.

httpx's timeouts are per read: an endpoint that keeps sending (an endless
server-sent-event stream, a trickle just under the read timeout) held verify
forever, and a huge answer was read whole. A loopback server here does both to
the real OpenAI client and httpx, through verify's bounded client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest

from sparkctl.serve import probe


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _endless(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = (
            b'data: {"id":"x","object":"text_completion","created":0,"model":"m",'
            b'"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
        )
        try:
            while True:  # a token every 20 ms, forever
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(0.02)
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._endless()

    def do_GET(self) -> None:
        body = b"[" + b"0," * (1 << 20) + b"0]"  # 2 MiB of JSON
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            return


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_an_endless_stream_ends_at_the_deadline(server: str) -> None:
    client = openai.OpenAI(
        base_url=f"{server}/v1",
        api_key="none",
        max_retries=0,
        http_client=probe.client(None, 1.5),
    )
    chunks = 0
    # Only the bounded transport says this: the stream ended at its deadline, not by itself.
    with pytest.raises(httpx.ReadTimeout, match=r"no complete answer within 1\.5 s"):
        for _ in client.completions.create(model="m", prompt="p", max_tokens=8, stream=True):
            chunks += 1
    assert chunks > 5  # it was streaming, each read well inside httpx's read timeout


def test_the_unbounded_client_would_have_kept_reading(server: str) -> None:
    """The same stream through a plain httpx client: past the deadline it still reads."""
    client = openai.OpenAI(
        base_url=f"{server}/v1",
        api_key="none",
        max_retries=0,
        http_client=httpx.Client(timeout=1.0),
    )
    start, chunks = time.monotonic(), 0
    stream = client.completions.create(model="m", prompt="p", max_tokens=8, stream=True)
    for _ in stream:  # still reading at twice the bounded client's deadline
        chunks += 1
        if time.monotonic() - start > 3:
            break
    stream.close()
    assert chunks > 20


def test_an_oversized_answer_is_cut_at_the_limit(server: str) -> None:
    with (
        probe.client(None, 30.0, limit=1 << 20) as client,
        pytest.raises(httpx.ReadError, match="exceeds 1048576 bytes"),
    ):
        client.get(f"{server}/server_info")
    with probe.client(None, 30.0, limit=4 << 20) as client:
        assert len(client.get(f"{server}/server_info").json()) == (1 << 20) + 1
