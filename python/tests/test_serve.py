"""`snapkv serve`: the OpenAI HTTP API over the engine, on loopback only.

* the official `openai` client and curl get exactly the single-sequence answers, streamed and
  not;
* a flood of concurrent well-formed (streamed or not) and hostile requests (bounded: 35
  requests, 8 at a time): every well-formed request gets exactly its single-sequence
  tokens, every hostile one an OpenAI error object (400/404), and the server keeps serving;
* a full queue answers 503; a client that disconnects mid-stream has its rows freed;
* SIGTERM drains: the running request finishes, then the process exits 0.

The retrieval model with W=16, C=64 and a word-level tokenizer (serving_inputs.py).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import require_aot_tools
from serving_inputs import (
    CAPACITY,
    MODEL,
    WINDOW,
    load_engine,
    said,
    words,
    write_tokenizer,
)

from snapkv.serving.openai_server import make_server
from snapkv.tasks import retrieval

NAME = "retrieval-llama"


def asks(n=6):
    return [retrieval.generate(int(L), 5, "multitoken", i).ids.tolist()
            for i, L in enumerate(np.linspace(40, 260, n).astype(int))]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def served(tokenizer_dir):
    """(base url, engine, {prompt: tokens of its single-sequence run}, server)."""
    require_aot_tools()
    engine = load_engine(tokenizer=tokenizer_dir, cache_budget_mb=0.4, max_queue=64)
    # Computed before the engine's thread runs the model: one caller at a time.
    expected = {}
    for ids in asks():
        expected[tuple(ids)] = engine.model.generate(np.array([ids]), 11)["tokens"]
    full = engine.catalogue.get(None).model
    expected["full"] = full.generate(np.array([asks()[1]]), 5)["tokens"]
    server = make_server(engine, "127.0.0.1", 0, name=NAME)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", engine, expected, server
    server.draining = True
    engine.drain(30)
    assert server.idle(30)
    server.shutdown()
    server.server_close()


def post(url, body, timeout=60, raw=None):
    """(status, parsed JSON body) of a POST."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def post_stream(url, body, timeout=60):
    """(status, token ids of the streamed chunks, finish reason) of a streamed POST."""
    request = urllib.request.Request(url, data=json.dumps(dict(body, stream=True)).encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
    tokens, reason = [], None
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            tokens += choice["token_ids"]
            reason = choice["finish_reason"] or reason
        return response.status, tokens, reason


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def settle(base, engine):
    """Wait until nothing runs (at most 30 s); the /health body then."""
    deadline = time.time() + 30
    while time.time() < deadline:
        status, health = get(f"{base}/health")
        if health["running"] == health["waiting"] == health["cache_reserved_bytes"] == 0:
            return health
        time.sleep(0.05)
    raise AssertionError(f"still running: {health}")


def test_openai_client(served):
    import openai

    base, engine, expected, _ = served
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == [NAME]
    ids = asks()[2]
    want = expected[tuple(ids)]
    done = client.completions.create(model=NAME, prompt=words(ids), max_tokens=12,
                                     temperature=0, extra_body={"ignore_eos": True})
    assert done.choices[0].text == said(want)
    assert done.choices[0].finish_reason == "length"
    assert done.usage.prompt_tokens == len(ids) and done.usage.completion_tokens == 12
    # Token ids in, streamed out.
    chunks = client.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in chunks).split() == said(want).split()
    # Chat, streamed: the template's turn (<4> ... <2>) then the model's answer.
    turn = asks()[3][1:]
    chat = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": words(turn)}], max_tokens=4,
        temperature=0, stream=True, extra_body={"ignore_eos": True})
    text = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
    want_chat = engine.generate([[4, *turn, 2]], engine_params(4))[0].tokens
    assert text.split() == said(want_chat).split()
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model=NAME, prompt=words(ids), max_tokens=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt=words(ids), max_tokens=2)


def engine_params(n):
    from snapkv.serving import SamplingParams

    return SamplingParams(max_tokens=n, ignore_eos=True)


def test_curl(served):
    base, _, expected, _ = served
    ids = asks()[4]
    body = json.dumps(dict(model=NAME, prompt=ids, max_tokens=5, temperature=0,
                           ignore_eos=True))
    out = subprocess.run(["curl", "-sS", "--max-time", "60", f"{base}/v1/completions", "-H",
                          "Content-Type: application/json", "-d", body],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["choices"][0]["token_ids"] == expected[tuple(ids)][:5]
    streamed = subprocess.run(["curl", "-sSN", "--max-time", "60", f"{base}/v1/completions",
                               "-H", "Content-Type: application/json",
                               "-d", body.replace('"max_tokens": 5', '"stream": true, '
                                                  '"max_tokens": 5')],
                              capture_output=True, text=True, timeout=90)
    events = [line[len("data: "):] for line in streamed.stdout.splitlines()
              if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    tokens = [t for e in events[:-1] for t in json.loads(e)["choices"][0]["token_ids"]]
    assert tokens == expected[tuple(ids)][:5]
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    health = subprocess.run(["curl", "-sS", f"{base}/health"], capture_output=True, text=True,
                            timeout=30)
    assert json.loads(health.stdout)["status"] == "ok"


def hostile(base):
    """(what, status, callable) of requests that must be refused."""
    url = f"{base}/v1/completions"
    long_prompt = list(range(16, 80)) * 70  # 4,480 tokens: past the 4,160 positions

    def raw_socket(payload: bytes):
        def send():
            host, port = base[len("http://"):].split(":")
            with socket.create_connection((host, int(port)), timeout=30) as s:
                s.sendall(payload)
                reply = b""
                while chunk := s.recv(65536):
                    reply += chunk
            head, _, body = reply.partition(b"\r\n\r\n")
            return int(head.split()[1]), json.loads(body)
        return send

    cases = [
        ("malformed JSON", 400, lambda: post(url, None, raw=b'{"prompt": [1, 2')),
        ("not an object", 400, lambda: post(url, [1, 2, 3])),
        ("max_tokens as a string", 400, lambda: post(url, dict(prompt=[1] * 20,
                                                               max_tokens="5"))),
        ("max_tokens 0", 400, lambda: post(url, dict(prompt=[1] * 20, max_tokens=0))),
        ("absurd max_tokens", 400, lambda: post(url, dict(prompt=[1] * 20,
                                                          max_tokens=10 ** 12))),
        ("temperature -1", 400, lambda: post(url, dict(prompt=[1] * 20, temperature=-1))),
        ("unknown field", 400, lambda: post(url, dict(prompt=[1] * 20, colour="red"))),
        ("prompt of the wrong type", 400, lambda: post(url, dict(prompt={"a": 1}))),
        ("token id out of range", 400, lambda: post(url, dict(prompt=[1, 2, 99999]))),
        ("prompt past the positions", 400, lambda: post(url, dict(prompt=long_prompt,
                                                                  max_tokens=2))),
        ("body over the limit", 400, lambda: post(url, None, raw=b" " * (2 << 20))),
        ("bad snapkv setting", 400, lambda: post(url, dict(prompt=[1] * 20,
                                                           snapkv={"capacity": 8}))),
        ("unknown model", 404, lambda: post(url, dict(model="nope", prompt=[1] * 20))),
        ("unknown path", 404, lambda: post(f"{base}/v1/embeddings", dict(input="x"))),
        ("garbage request line", 400, raw_socket(b"\x00\x01garbage\r\n\r\n")),
        ("declared body past any limit", 400, raw_socket(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")),
        ("no Content-Length", 400, raw_socket(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
    ]
    return cases


def disconnect_mid_stream(base, ids):
    """Start a long stream, read one event, hang up."""
    host, port = base[len("http://"):].split(":")
    body = json.dumps(dict(prompt=ids, max_tokens=100, stream=True, ignore_eos=True,
                           temperature=0)).encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        seen = b""
        while b"data: " not in seen:
            chunk = s.recv(4096)
            assert chunk, f"the server closed the stream before any event: {seen!r}"
            seen += chunk
    return "disconnected"


def test_flood_of_concurrent_and_hostile_requests(served):
    base, engine, expected, _ = served
    url = f"{base}/v1/completions"
    jobs = []
    for round_ in range(2):
        for n, ids in enumerate(asks()):
            max_tokens = 4 + (n + round_) % 8
            prompt = ids if n % 2 else words(ids)  # token ids or text
            jobs.append(("ok", (tuple(ids), max_tokens), lambda p=prompt, m=max_tokens: post(
                url, dict(model=NAME, prompt=p, max_tokens=m, temperature=0,
                          ignore_eos=True))))
    for n, ids in enumerate(asks()[::2]):
        jobs.append(("streamed", (tuple(ids), 5 + n), lambda ids=ids, m=5 + n: post_stream(
            url, dict(prompt=ids, max_tokens=m, temperature=0, ignore_eos=True))))
    for what, status, call in hostile(base):
        jobs.append(("bad", (what, status), call))
    for ids in asks()[:3]:
        jobs.append(("gone", None, lambda ids=ids: disconnect_mid_stream(base, ids)))
    jobs.append(("full", None, lambda: post(url, dict(prompt=asks()[1], max_tokens=6,
                                                      snapkv="full", ignore_eos=True,
                                                      temperature=0))))
    assert len(jobs) == 36
    order = np.random.default_rng(0).permutation(len(jobs))
    start = time.time()
    with ThreadPoolExecutor(8) as pool:
        futures = [(jobs[i], pool.submit(jobs[i][2])) for i in order]
        outcomes = [(job, future.result(timeout=120)) for job, future in futures]
    assert time.time() - start < 120
    for (kind, key, _), result in outcomes:
        if kind == "ok":
            status, body = result
            assert status == 200, body
            choice = body["choices"][0]
            assert choice["token_ids"] == expected[key[0]][:key[1]]
            assert choice["text"] == said(expected[key[0]][:key[1]])
            assert choice["snapkv"]["cache_bytes"] > 0
        elif kind == "streamed":
            status, tokens, reason = result
            assert status == 200 and reason == "length"
            assert tokens == expected[key[0]][:key[1]]
        elif kind == "bad":
            status, body = result
            assert status == key[1], (key, body)
            assert set(body["error"]) == {"message", "type", "param", "code"}, key
            assert body["error"]["message"], key
        elif kind == "full":
            status, body = result
            assert status == 200, body
            assert body["choices"][0]["token_ids"] == expected["full"]
            assert "full cache" in body["choices"][0]["snapkv"]["model"]
    health = settle(base, engine)
    assert health["status"] == "ok" and health["cache_held_bytes"] == 0
    # Still serving, exactly as before.
    ids = asks()[0]
    status, body = post(url, dict(prompt=ids, max_tokens=3, temperature=0, ignore_eos=True))
    assert status == 200 and body["choices"][0]["token_ids"] == expected[tuple(ids)][:3]


def test_a_full_queue_answers_503(served):
    base, engine, _, _ = served
    saved, engine.max_queue = engine.max_queue, 0
    try:
        status, body = post(f"{base}/v1/completions", dict(prompt=asks()[0], max_tokens=2))
    finally:
        engine.max_queue = saved
    assert status == 503
    assert "waiting" in body["error"]["message"]


def test_connections_past_the_limit_are_closed(served):
    base, _, _, server = served
    host, port = base[len("http://"):].split(":")
    saved = server.max_connections
    try:
        with socket.create_connection((host, int(port)), timeout=30) as held:
            held.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert held.recv(4096).startswith(b"HTTP/1.1 200")  # kept alive: one in use
            server.max_connections = server._connections  # no room for another
            with socket.create_connection((host, int(port)), timeout=30) as extra:
                extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert extra.recv(4096) == b""  # closed without an answer
    finally:
        server.max_connections = saved
    assert get(f"{base}/health")[0] == 200


def test_disconnect_mid_stream_frees_the_rows(served):
    base, engine, _, _ = served
    settle(base, engine)
    disconnect_mid_stream(base, asks()[5])
    health = settle(base, engine)
    assert health["cache_held_bytes"] == 0


def test_sigterm_drains_and_exits_cleanly():
    require_aot_tools()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    server = subprocess.Popen(  # token ids only: no tokenizer (transformers) to load
        [sys.executable, "-m", "snapkv.cli", "serve", str(MODEL), "--window", str(WINDOW),
         "--capacity", str(CAPACITY), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env)
    try:
        base = None
        deadline = time.time() + 300
        while base is None and time.time() < deadline:
            line = server.stderr.readline()
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found:
                base = found.group(1)
            assert line or server.poll() is None, "the server exited"
        assert base, "the server did not start"
        ids = asks()[5]
        answer = {}
        worker = threading.Thread(target=lambda: answer.update(result=post(
            f"{base}/v1/completions", dict(prompt=ids, max_tokens=200, temperature=0,
                                           ignore_eos=True))))
        worker.start()
        deadline = time.time() + 30
        while get(f"{base}/health")[1]["running"] == 0 and time.time() < deadline:
            time.sleep(0.01)
        server.send_signal(signal.SIGTERM)
        worker.join(120)
        status, body = answer["result"]
        assert status == 200 and len(body["choices"][0]["token_ids"]) == 200
        assert server.wait(60) == 0
        assert "drained" in server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
