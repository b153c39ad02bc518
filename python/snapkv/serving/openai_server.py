"""``snapkv serve``: the OpenAI HTTP API over an :class:`~snapkv.serving.engine.Engine`, on
the standard library's :class:`http.server.ThreadingHTTPServer` (one thread per connection;
the engine's own thread runs the model).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both with ``stream``:
server-sent events), ``GET /v1/models``, ``GET /health``. A request may carry SnapKV settings
in the extra body field ``"snapkv"`` (``"full"``, or an object of
:class:`~snapkv.hf.Compaction` fields over the server's; :func:`.loading.compaction_of`).

Errors are OpenAI error objects (``{"error": {"message", "type", "param", "code"}}``): 400
for a bad request (malformed JSON, an unknown field, a field of the wrong type, a prompt past
the model's positions, ``max_tokens`` out of range, a body over the size limit), 404 for an
unknown path or model, 503 when the queue is full or the server is draining; the server goes
on serving. A client that goes away (mid-stream, or while it waits for a non-streamed answer)
has its sequence cancelled, which frees its cache rows at the engine's next step.
"""

from __future__ import annotations

import json
import queue
import select
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple

from .engine import Engine, EngineStopped, QueueFull, RequestError, SamplingParams
from .loading import LoadError

MAX_BODY = 1 << 20          # bytes of a request body at most
DISCARD_LIMIT = 64 << 20  # an over-long body up to this size is read and dropped
DISCARD_SECONDS = 5.0
MAX_TOKENS_LIMIT = 1 << 20  # a max_tokens above this is refused before the model looks at it
MAX_PROMPTS = 64            # prompts of one /v1/completions request at most
MAX_CONNECTIONS = 256       # open connections at most (a thread each)

# Fields a request may carry that change nothing here when they hold these values.
NEUTRAL = dict(n=(1,), best_of=(1,), echo=(False,), logprobs=(None, False),
               top_logprobs=(None, 0), presence_penalty=(0, 0.0),
               frequency_penalty=(0, 0.0), logit_bias=(None,), suffix=(None,),
               user=None, stream_options=None, response_format=None, store=(False, None),
               metadata=None, parallel_tool_calls=None, tools=(None,), tool_choice=(None,),
               service_tier=None)


class BadRequest(Exception):
    def __init__(self, message: str, param: Optional[str] = None,
                 status: HTTPStatus = HTTPStatus.BAD_REQUEST, code: Optional[str] = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.param, self.status, self.code, self.kind = param, status, code, kind


def error_body(message: str, kind: str = "invalid_request_error", param=None, code=None):
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _number(body: dict, name: str, default, low: float, high: float):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not low <= value <= high:
        raise BadRequest(f"{name} must be a number in [{low}, {high}], got {value!r}", name)
    return value


def _integer(body: dict, name: str, default, low: int, high: int):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{name} must be an integer in [{low}, {high}], got {value!r}", name)
    return value


def parse_sampling(body: dict, default_max_tokens: int, chat: bool) -> SamplingParams:
    """The sampling parameters of a request body (OpenAI's names and defaults:
    temperature 1, top_p 1, max_tokens 16 unless the server says otherwise)."""
    name = "max_tokens"
    if chat and body.get("max_completion_tokens") is not None:
        if body.get("max_tokens") is not None:
            raise BadRequest("give max_tokens or max_completion_tokens, not both",
                             "max_completion_tokens")
        name = "max_completion_tokens"
    max_tokens = _integer(body, name, default_max_tokens, 1, MAX_TOKENS_LIMIT)
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stop = tuple(stop)
    else:
        raise BadRequest("stop must be a string or a list of strings", "stop")
    if len(stop) > 4 or any(not s for s in stop):
        raise BadRequest("stop takes at most 4 non-empty strings", "stop")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise BadRequest("ignore_eos must be a boolean", "ignore_eos")
    return SamplingParams(max_tokens=max_tokens,
                          temperature=float(_number(body, "temperature", 1.0, 0, 2)),
                          top_p=float(_number(body, "top_p", 1.0, 0, 1)) or 1e-9,
                          seed=_integer(body, "seed", None, 0, 2 ** 63 - 1), stop=stop,
                          ignore_eos=ignore_eos)


def check_fields(body: dict, known: Tuple[str, ...]):
    for name, value in body.items():
        if name in known:
            continue
        if name in NEUTRAL:
            allowed = NEUTRAL[name]
            if allowed is not None and value not in allowed:
                raise BadRequest(f"{name}={value!r} is not supported by this server", name)
            continue
        raise BadRequest(f"unknown field {name!r}", name)
    stream_options = body.get("stream_options")
    if stream_options is not None and (not isinstance(stream_options, dict) or
                                       set(stream_options) - {"include_usage"}):
        raise BadRequest("stream_options takes only include_usage", "stream_options")


COMPLETION_FIELDS = ("model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop",
                     "stream", "snapkv", "ignore_eos")
CHAT_FIELDS = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature",
               "top_p", "seed", "stop", "stream", "snapkv", "ignore_eos")


def completion_prompts(body: dict) -> List:
    """The prompts of a /v1/completions body: a string, a list of strings, a list of token
    ids or a list of such lists."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            prompts = prompt
        elif all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            prompts = [prompt]
        elif all(isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool)
                                                    for t in p) for p in prompt):
            prompts = prompt
        else:
            raise BadRequest("prompt must be a string, a list of strings, a list of token ids "
                             "or a list of lists of token ids", "prompt")
        if len(prompts) > MAX_PROMPTS:
            raise BadRequest(f"at most {MAX_PROMPTS} prompts per request", "prompt")
        return prompts
    raise BadRequest("prompt is required: a string, a list of strings, a list of token ids or "
                     "a list of lists of token ids", "prompt")


class Server(ThreadingHTTPServer):
    """The HTTP server: `engine` (started), the served model's `name`, `default_max_tokens`,
    `max_body` bytes, and whether it is `draining` (new requests get 503). :func:`serve`
    waits for the requests in progress (:meth:`idle`), not for idle keep-alive
    connections."""
    daemon_threads = True
    block_on_close = False

    def __init__(self, address, engine: Optional[Engine], *, name: str,
                 default_max_tokens: int = 16, max_body: int = MAX_BODY,
                 max_connections: int = MAX_CONNECTIONS, log=None):
        self.engine, self.name = engine, name
        self.max_connections, self._connections = max_connections, 0
        self.default_max_tokens, self.max_body = default_max_tokens, max_body
        self.draining = False
        self.created = int(time.time())
        self.log = log
        self._active = 0
        self._quiet = threading.Condition()
        super().__init__(address, Handler)

    def process_request(self, request, client_address):
        """A thread per connection, up to `max_connections`; past that the connection is
        closed at once (a client that opens thousands does not get thousands of threads)."""
        with self._quiet:
            refuse = self._connections >= self.max_connections
            if not refuse:
                self._connections += 1
        if refuse:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._quiet:
                self._connections -= 1

    def handle_error(self, request, client_address):
        """A client that resets or drops its connection is routine, not a server fault:
        socketserver would print a traceback for it."""
        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            return
        super().handle_error(request, client_address)

    def busy(self, delta: int):
        with self._quiet:
            self._active += delta
            self._quiet.notify_all()

    def idle(self, timeout: float) -> bool:
        """Wait until no request is being answered (at most `timeout` seconds)."""
        with self._quiet:
            return self._quiet.wait_for(lambda: self._active == 0, timeout)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A request line too malformed to name a version is answered with a status line and
    # headers all the same (HTTP/0.9 would get a bare body).
    default_request_version = "HTTP/1.0"
    server_version = "snapkv-serve"
    timeout = 60  # seconds a connection may sit idle or trickle its request

    server: Server

    # -- plumbing ------------------------------------------------------------------------

    def log_error(self, format, *args):
        print(f"snapkv serve: {self.address_string()}: {format % args}", file=sys.stderr,
              flush=True)

    def log_message(self, format, *args):
        if self.server.log:
            self.server.log(f"{self.address_string()} {format % args}")

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (a malformed request line or header, a request line
        too long) as OpenAI error objects too."""
        self.close_connection = True
        try:
            self._send_json(code, error_body(message or HTTPStatus(code).phrase))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send_json(self, status: int, payload: dict, headers: Tuple = ()):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: BadRequest):
        headers = (("Retry-After", "1"),) if error.status == HTTPStatus.SERVICE_UNAVAILABLE \
            else ()
        self._send_json(error.status, error_body(str(error), error.kind, error.param,
                                                 error.code), headers)

    def _read_body(self) -> dict:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise BadRequest("chunked request bodies are not supported: send Content-Length")
        length = self.headers.get("Content-Length")
        try:
            size = int(length)
        except (TypeError, ValueError):
            self.close_connection = True
            raise BadRequest("a JSON body with Content-Length is required") from None
        if size < 0 or size > self.server.max_body:
            self.close_connection = True
            self._discard(size)
            raise BadRequest(f"the body has {size} bytes, more than the limit of "
                             f"{self.server.max_body}")
        raw = self.rfile.read(size)
        if len(raw) != size:
            self.close_connection = True
            raise BadRequest("the body ended before Content-Length bytes")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise BadRequest(f"the body is not valid JSON: {error}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _discard(self, size: int):
        """Read and drop an over-long body (if at most DISCARD_LIMIT bytes, for at most
        DISCARD_SECONDS), so that a client still sending it reads our 400 instead of a
        broken pipe; a larger one is left unread and the connection closed."""
        if size <= 0 or size > DISCARD_LIMIT:
            return
        left, deadline = size, time.monotonic() + DISCARD_SECONDS
        try:
            self.connection.settimeout(DISCARD_SECONDS)
            while left > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass
        finally:
            self.connection.settimeout(self.timeout)

    def _peer_gone(self) -> bool:
        """Whether the client closed its end (readable and at EOF)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # -- routes --------------------------------------------------------------------------

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/health":
            engine = self.server.engine
            status = "draining" if self.server.draining else "ok"
            self._send_json(HTTPStatus.SERVICE_UNAVAILABLE if self.server.draining
                            else HTTPStatus.OK,
                            dict(status=status, running=engine.running, waiting=engine.waiting,
                                 cache_budget_bytes=engine.cache_budget,
                                 cache_reserved_bytes=engine.reserved,
                                 cache_held_bytes=engine.held_bytes()))
        elif path == "/v1/models":
            self._send_json(HTTPStatus.OK, dict(object="list", data=[dict(
                id=self.server.name, object="model", created=self.server.created,
                owned_by="snapkv")]))
        else:
            self._send_error(BadRequest(f"no such endpoint: GET {path}",
                                        status=HTTPStatus.NOT_FOUND, code="not_found"))

    def do_POST(self):
        self.server.busy(1)
        try:
            self._post()
        finally:
            self.server.busy(-1)
            if self.server.draining:
                self.close_connection = True

    def _post(self):
        path = self.path.split("?")[0]
        try:
            if path not in ("/v1/completions", "/v1/chat/completions"):
                raise BadRequest(f"no such endpoint: POST {path}", status=HTTPStatus.NOT_FOUND,
                                 code="not_found")
            body = self._read_body()
            chat = path == "/v1/chat/completions"
            self._complete(body, chat)
        except BadRequest as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a bug: answer 500 and keep serving
            self.close_connection = True
            self.log_error("internal error: %s: %s", type(error).__name__, error)
            try:
                self._send_error(BadRequest(f"internal error: {type(error).__name__}: {error}",
                                            status=HTTPStatus.INTERNAL_SERVER_ERROR,
                                            kind="server_error"))
            except OSError:
                pass

    def _submit(self, body: dict, chat: bool):
        check_fields(body, CHAT_FIELDS if chat else COMPLETION_FIELDS)
        model = body.get("model")
        if model is not None and model != self.server.name:
            raise BadRequest(f"the model {model!r} does not exist here; this server serves "
                             f"{self.server.name!r}", "model", HTTPStatus.NOT_FOUND,
                             "model_not_found")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be a boolean", "stream")
        params = parse_sampling(body, self.server.default_max_tokens, chat)
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list", "messages")
            prompts = [messages]
        else:
            prompts = completion_prompts(body)
        if self.server.draining:
            raise BadRequest("the server is shutting down", status=HTTPStatus.SERVICE_UNAVAILABLE,
                             kind="server_error")
        engine, seqs = self.server.engine, []
        try:
            for prompt in prompts:
                seqs.append(engine.submit(prompt, params, body.get("snapkv")))
        except (RequestError, QueueFull, EngineStopped, LoadError) as error:
            for seq in seqs:
                engine.cancel(seq)
            if isinstance(error, RequestError):
                raise BadRequest(str(error), "snapkv" if "snapkv" in str(error) else None) \
                    from None
            if isinstance(error, LoadError):
                raise BadRequest(str(error), "snapkv", HTTPStatus.INTERNAL_SERVER_ERROR,
                                 kind="server_error") from None
            raise BadRequest(str(error), status=HTTPStatus.SERVICE_UNAVAILABLE,
                             kind="server_error") from None
        return seqs, stream, body

    def _complete(self, body: dict, chat: bool):
        seqs, stream, body = self._submit(body, chat)
        engine = self.server.engine
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        try:
            if stream:
                self._stream(seqs, chat, rid, body)
            else:
                while not all(s.done.wait(0.2) for s in seqs):
                    if self._peer_gone():
                        raise ConnectionResetError
                self._send_json(HTTPStatus.OK, self._response(seqs, chat, rid))
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
        finally:
            for seq in seqs:
                if not seq.done.is_set():
                    engine.cancel(seq)  # the client went away: its rows go back

    def _usage(self, seqs) -> dict:
        prompt = sum(s.length for s in seqs)
        completion = sum(len(s.completion.tokens) if s.completion else len(s.tokens)
                         for s in seqs)
        return dict(prompt_tokens=prompt, completion_tokens=completion,
                    total_tokens=prompt + completion)

    def _text(self, completion) -> str:
        if completion.text is not None:
            return completion.text
        return " ".join(map(str, completion.tokens))  # no tokenizer: the ids as text

    def _response(self, seqs, chat: bool, rid: str) -> dict:
        choices = []
        for i, seq in enumerate(seqs):
            done = seq.completion
            if done.finish_reason == "error":
                raise BadRequest(f"the model stopped: {done.error}",
                                 status=HTTPStatus.INTERNAL_SERVER_ERROR, kind="server_error")
            extra = dict(token_ids=done.tokens, snapkv=dict(
                model=done.model, cache_bytes=done.cache_bytes,
                cache_allocated_bytes=done.cache_allocated, ttft_s=done.ttft_s))
            if chat:
                choices.append(dict(index=i, message=dict(role="assistant",
                                                          content=self._text(done)),
                                    logprobs=None, finish_reason=done.finish_reason, **extra))
            else:
                choices.append(dict(index=i, text=self._text(done), logprobs=None,
                                    finish_reason=done.finish_reason, **extra))
        return dict(id=rid, object="chat.completion" if chat else "text_completion",
                    created=int(time.time()), model=self.server.name, choices=choices,
                    usage=self._usage(seqs))

    def _event(self, payload):
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _stream(self, seqs, chat: bool, rid: str, body: dict):
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
        tokenizer = self.server.engine.tokenizer

        def chunk(index, delta=None, text="", reason=None, tokens=()):
            if chat:
                choice = dict(index=index, delta=delta if delta is not None else
                              ({"content": text} if text else {}), logprobs=None,
                              finish_reason=reason)
            else:
                choice = dict(index=index, text=text, logprobs=None, finish_reason=reason)
            choice["token_ids"] = list(tokens)
            return dict(id=rid, object=kind, created=created, model=self.server.name,
                        choices=[choice])

        if chat:
            for i in range(len(seqs)):
                self._event(chunk(i, delta={"role": "assistant", "content": ""}))
        open_ = list(range(len(seqs)))
        while open_:
            news = False
            for i in list(open_):
                try:
                    delta = seqs[i].events.get(timeout=0.05 if len(open_) > 1 else 1.0)
                except queue.Empty:
                    continue
                news = True
                text = delta.text if tokenizer is not None else \
                    "".join(f" {t}" for t in delta.tokens)
                if delta.finish_reason == "error":
                    self._event(error_body(f"the model stopped: {delta.error}", "server_error"))
                    open_.remove(i)
                    continue
                if text or delta.tokens:
                    self._event(chunk(i, text=text, tokens=delta.tokens))
                if delta.finish_reason is not None:
                    self._event(chunk(i, reason=delta.finish_reason))
                    open_.remove(i)
            if not news:
                # A comment line: ignored by clients, and how a closed connection shows.
                self.wfile.write(b": waiting\n\n")
                self.wfile.flush()
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            self._event(dict(id=rid, object=kind, created=created, model=self.server.name,
                             choices=[], usage=self._usage(seqs)))
        self._event("[DONE]")


def make_server(engine: Optional[Engine], host: str = "127.0.0.1", port: int = 8000, *,
                name: str = "snapkv", default_max_tokens: int = 16,
                max_body: int = MAX_BODY, max_connections: int = MAX_CONNECTIONS,
                log=None) -> Server:
    """A bound (not yet serving) server over `engine` (whose thread it starts), or over none
    yet: the CLI binds first, so that a port in use is said before the model loads, then
    sets ``server.engine`` and starts it."""
    if engine is not None:
        engine.start()
    return Server((host, port), engine, name=name, default_max_tokens=default_max_tokens,
                  max_body=max_body, max_connections=max_connections, log=log)


def serve(server: Server, stop: threading.Event, grace: float = 300.0) -> bool:
    """Serve until `stop` is set (the CLI sets it on SIGTERM/SIGINT), then drain: new
    requests get 503, the queued and running sequences finish (at most `grace` seconds),
    the handlers send their answers, and the socket closes. Returns whether it drained."""
    thread = threading.Thread(target=server.serve_forever, kwargs=dict(poll_interval=0.2),
                              name="snapkv-http", daemon=True)
    thread.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.draining = True
        drained = server.engine.drain(grace)
        drained = server.idle(30) and drained  # the last answers are written
        server.shutdown()
        server.server_close()
        thread.join(5)
    return drained
