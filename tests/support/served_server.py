"""A small OpenAI-compatible test server on 127.0.0.1 (a random port), for the served-model tests: /v1/embeddings
(hashed bag-of-words vectors, actors/fake.py's), /v1/rerank, /v1/completions (yes/no logprobs) and
/v1/chat/completions, with faults queued per endpoint: timeout, 429, 500, reset, truncated, malformed, wrong_dim,
empty, off_format, refuse_schema, echo_key (a 500 whose body repeats the Authorization header)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from fanout.actors.fake import hashed_vector

from fanout.text import terms


class FakeServer:
    """`with FakeServer() as srv:` serves at `srv.url` (`http://127.0.0.1:<port>/v1`); `srv.fail(path, *faults)`
    queues faults for the next requests to that endpoint; `srv.requests` lists (path, headers, body) seen."""

    def __init__(self, dim: int = 32, salt: str = "", delay_s: float = 0.0, stall_s: float = 2.0,
                 chat: str = "lines", tokenize: bool = False):
        self.dim, self.salt, self.delay_s, self.stall_s, self.chat = dim, salt, delay_s, stall_s, chat
        self.tokenize = tokenize  # answer POST /tokenize (at the root, as llama-server does): words + 1 (BOS)
        self.faults: dict[str, list[str]] = {}
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.in_flight = self.max_in_flight = 0
        self.down_after: int | None = None  # answer 503 to every embeddings request once this many were answered
        self.embedded = 0  # texts answered by /embeddings
        self.lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                path = self.path.removeprefix("/v1/")
                with srv.lock:
                    srv.requests.append((path, dict(self.headers), body))
                    fault = srv.faults.get(path, []).pop(0) if srv.faults.get(path) else ""
                    srv.in_flight += 1
                    srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
                try:
                    if srv.delay_s:
                        time.sleep(srv.delay_s)
                    srv.answer(self, path, body, fault)
                finally:
                    with srv.lock:
                        srv.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # serve_forever checks for shutdown() every poll_interval (0.5 s by default, what every test waited)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def fail(self, path: str, *faults: str) -> None:
        with self.lock:
            self.faults.setdefault(path, []).extend(faults)

    def count(self, path: str) -> int:
        return sum(1 for p, _, _ in self.requests if p == path)

    def vector(self, text: str, dim: int) -> list[float]:
        return [float(x) for x in hashed_vector(self.salt + " " + text if self.salt else text, dim)]

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None,
             raw: bytes | None = None, length: int | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(length if length is not None else len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def answer(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any], fault: str) -> None:
        if fault == "timeout":
            time.sleep(self.stall_s)
        elif fault == "429":
            return self.send(h, 429, {"error": "slow down"}, {"Retry-After": "0.3"})
        elif fault == "500":
            return self.send(h, 500, {"error": "overloaded"})
        elif fault == "echo_key":
            return self.send(h, 500, {"error": f"bad header {h.headers.get('Authorization')}"})
        elif fault == "reset":  # RST instead of an answer
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.close()
            return None
        elif fault == "truncated":
            self.send(h, 200, None, raw=b'{"data": [{"index": 0, "emb', length=400)
            h.close_connection = True
            return None
        elif fault == "malformed":
            return self.send(h, 200, None, raw=b"<html>502 bad gateway</html>")
        elif fault == "refuse_schema" and "response_format" in body:
            return self.send(h, 400, {"error": "response_format is not supported"})
        elif fault == "refuse_schema_500" and "response_format" in body:  # llama-cpp-python's validation error
            return self.send(h, 500, {"error": {"message": "body.response_format.type: Input should be 'text'"}})
        if path == "embeddings":
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            with self.lock:
                down = self.down_after is not None and self.count("embeddings") > self.down_after
                self.embedded += 0 if down else len(texts)
            if down:
                return self.send(h, 503, {"error": "outage"})
            dim = self.dim + 1 if fault == "wrong_dim" else self.dim
            data = [{"object": "embedding", "index": i, "embedding": self.vector(t, dim)} for i, t in enumerate(texts)]
            return self.send(h, 200, {"object": "list", "data": data[::-1], "model": body.get("model")})
        if path == "rerank":
            q = {t.casefold() for t in terms(body["query"])}
            res = [{"index": i, "relevance_score": len(q & {t.casefold() for t in terms(d)}) / max(1, len(q))}
                   for i, d in enumerate(body["documents"])]
            return self.send(h, 200, {"results": sorted(res, key=lambda r: -r["relevance_score"])})
        if path == "completions" and body.get("logprobs"):
            prompt = body["prompt"]
            doc = prompt.split("<Document>:", 1)[1]
            query = prompt.split("<Query>: ", 1)[1].split("\n", 1)[0]
            share = len({t.casefold() for t in terms(query)} & {t.casefold() for t in terms(doc)}) / max(1, len(terms(query)))
            top = {"yes": -0.1 - 4 * (1 - share), "no": -0.1 - 4 * share, "maybe": -9.0}
            return self.send(h, 200, {"choices": [{"text": "yes", "logprobs": {"top_logprobs": [top]}}]})
        if path in ("chat/completions", "completions"):
            text = self.expansion(body, fault)
            choice = {"index": 0, "finish_reason": "stop"}
            choice.update({"message": {"role": "assistant", "content": text}} if path.startswith("chat") else {"text": text})
            return self.send(h, 200, {"choices": [choice]})
        if path == "/tokenize" and self.tokenize:
            return self.send(h, 200, {"tokens": list(range(len(body["content"].split()) + 1))})
        return self.send(h, 404, {"error": f"no endpoint {path}"})

    def expansion(self, body: dict[str, Any], fault: str) -> str:
        msgs = body.get("messages") or [{"content": body.get("prompt", "")}]
        last = msgs[-1]["content"]
        query = last.split(": ", 1)[1].split("\n", 1)[0].strip() if ": " in last else last
        if fault == "empty":
            return ""
        if fault == "off_format":
            return "Sure! Here are some ideas for your search."
        lines = [("lex", f"{query} settings"), ("vec", f"how do I {query}"), ("hyde", f"To {query}, open the menu.")]
        if "response_format" in body:
            schema = body["response_format"]["json_schema"]["schema"]
            if "lines" in schema["properties"]:
                return json.dumps({"lines": [{"kind": k, "text": t} for k, t in lines]})
            return json.dumps({"short_query": f"{query} settings", "rephrased_query": f"how do I {query}",
                               "expected_answer": f"To {query}, open the menu."})
        return "".join(f"{k}: {t}\n" for k, t in lines)
