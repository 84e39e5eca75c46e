"""uvicorn's h11 connection with what `serve:` promises on top of it (fanout/serve/http.py runs it).

uvicorn's public options cover the backlog, keep-alive and the headers' size (fanout/serve/http.py passes
them); what they do not cover lives here, in a subclass of uvicorn's `H11Protocol` (not a public API: the
pyproject pins uvicorn's minor release, and tests/test_serve*.py check each behaviour on it): a connection over
`serve.max_connections` answered 503 at once; a whole-request deadline and an idle deadline while a request
arrives (408); h11's refusals (a malformed request line or Content-Length, too large headers) as a JSON 4xx
naming what was sent instead of uvicorn's plain-text 400; a half-closed request answered 400; an answer
written past the parser half-closes and lingers, so the client reads it instead of a reset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fanout.serve.app import json_bytes
from fanout.serve.client import ANSWER_HINT

if TYPE_CHECKING:
    from fanout.config import ServeConfig


def raw_answer(status: int, message: str) -> bytes:
    """A whole HTTP answer written past the parser (h11 sends none before a request has arrived)."""
    from http import HTTPStatus

    body = json_bytes({"error": message})
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def refusal(reason: str, head: bytes, limits: ServeConfig) -> str:
    """h11's reason for refusing a request (`bad Content-Length`, ...) as a message naming what was sent."""
    import re

    if "Content-Length" in reason:
        given = re.findall(rb"(?im)^content-length:[ \t]*([^\r\n]*)", head)
        shown = ", ".join(repr(g.decode("latin-1")[:40]) for g in given[:3]) or "?"
        return f"Content-Length must be a whole number of bytes, sent once, got {shown}"
    if reason.startswith("illegal request line"):
        line = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
        return f"the request line {line.decode('latin-1')[:60]!r} is not `METHOD /path HTTP/1.x`; {ANSWER_HINT}"
    if reason == "Receive buffer too long":
        return (f"the request's headers are larger than {limits.max_header_kb} KiB (serve.max_header_kb); "
                "send fewer or shorter headers")
    return f"{reason}; {ANSWER_HINT}"


def protocol(limits: ServeConfig) -> type:
    """uvicorn's h11 connection, plus what `serve:` promises on top of it: a connection over
    `serve.max_connections` is answered 503 at once; a request (headers and body) must arrive within
    `serve.request_timeout_s` and never stall for `serve.idle_timeout_s`, else 408 and close (a connection that
    sends nothing is closed silently after `idle_timeout_s`; between kept-alive requests uvicorn's keep-alive
    timeout closes it); h11's own refusals (a malformed request line or Content-Length, too large headers) come
    as a JSON 4xx naming what was sent, not uvicorn's plain-text 400."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    idle, whole = limits.idle_timeout_s, limits.request_timeout_s
    head_keep = 4096  # bytes of a request's start kept to name what a refused request sent

    class Parser(h11.Connection):
        """h11's parser, remembering why it refused a request (uvicorn drops the reason)."""

        refused: h11.RemoteProtocolError | None = None

        def next_event(self) -> Any:
            try:
                return super().next_event()
            except h11.RemoteProtocolError as e:
                self.refused = e
                raise

    class Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.conn = Parser(h11.SERVER, limits.max_header_kb * 1024)
            self.timer: Any = None
            self.began: float | None = None  # when the first byte of the request now arriving came
            self.last = 0.0  # when the last byte came
            self.head = b""  # the start of that request
            self.lingering = False  # answered and half-closed: what the client still sends is dropped

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.last = self.loop.time()
            if len(self.connections) > limits.max_connections:
                self.answer_and_close(503, f"fanout serve holds {limits.max_connections} connections "
                                           "(serve.max_connections); try again")
                return
            self.timer = self.loop.call_later(idle, self.expire)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.lingering:
                return
            now = self.last = self.loop.time()
            if self.conn.their_state is h11.IDLE:  # a request begins: the first, or the next one kept alive
                if self.began is None:
                    self.began, self.head = now, b""
                    if self.timer is None:
                        self.timer = self.loop.call_later(idle, self.expire)
                if len(self.head) < head_keep:
                    self.head += data[:head_keep - len(self.head)]
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self.began = None  # the whole request is here (or refused): the app has it now

        def arriving(self) -> bool:
            """Whether a request is on its way in: headers begun, or a body the app still waits for."""
            state = self.conn.their_state
            if self.began is None:
                return False
            if state is h11.IDLE:
                return True
            return state is h11.SEND_BODY and self.cycle is not None and not self.cycle.response_started

        def expire(self) -> None:
            self.timer = None
            if self.transport.is_closing():
                return
            if self.lingering:
                self.transport.close()
                return
            now = self.loop.time()
            if self.cycle is None and self.began is None:  # connected, and silent since
                if now - self.last >= idle:
                    self.transport.close()
                else:
                    self.timer = self.loop.call_later(self.last + idle - now, self.expire)
                return
            if not self.arriving():
                self.began = None
                return
            part = "headers" if self.conn.their_state is h11.IDLE else "body"
            assert self.began is not None  # arriving(): the request's first byte came and set it
            if now - self.began >= whole:
                self.answer_and_close(408, f"the request's {part} did not arrive within {whole:g} s "
                                           f"(serve.request_timeout_s); send the whole {part} at once")
            elif now - self.last >= idle:
                self.answer_and_close(408, f"the request's {part} stalled for {idle:g} s "
                                           f"(serve.idle_timeout_s); send the whole {part} at once")
            else:
                self.timer = self.loop.call_later(min(self.last + idle, self.began + whole) - now, self.expire)

        # asyncio's Protocol.eof_received returns bool | None (True keeps the transport); uvicorn's says None
        def eof_received(self) -> bool | None:  # type: ignore[override]
            """The client shut its sending side: with a request half-sent (headers, or a body shorter than its
            Content-Length) it is answered 400 before the connection closes, not dropped."""
            if self.lingering or self.transport.is_closing() or not self.arriving():
                return super().eof_received()
            if self.conn.their_state is h11.IDLE:
                self.answer_and_close(400, "the client closed its side before the request's headers were whole; "
                                           "send the whole request")
            else:
                length = dict(self.headers).get(b"content-length", b"?").decode("latin-1")[:20]
                self.answer_and_close(400, f"the body ended before the {length} bytes its Content-Length "
                                           "announced (the client closed its side); send the whole body")
            return True  # the transport stays open to send the answer (answer_and_close ends it)

        def send_400_response(self, msg: str) -> None:
            e = self.conn.refused  # type: ignore[attr-defined]  # self.conn is a Parser; typed h11.Connection
            status = e.error_status_hint if e is not None and e.error_status_hint in (400, 431, 501) else 400
            self.answer_and_close(status, refusal(str(e) if e is not None else msg, self.head, limits))

        def answer_and_close(self, status: int, message: str) -> None:
            """Answer, half-close, and close when the client does (or after `idle_timeout_s`): closing at once
            with its request unread would reset the connection and lose the answer."""
            self.transport.write(raw_answer(status, message))
            if self.cycle is not None:  # the app's answer to the request (if it still sends one) is dropped, not
                self.cycle.disconnected = True  # written after this one (a traceback in the log each time)
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            self.transport.write_eof()
            self.lingering = True
            self.transport.resume_reading()  # (if flow control paused it) to see the client's end
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_later(idle, self.expire)

    return Protocol
