"""``snapkv serve``: an OpenAI-compatible HTTP server over one compiled model
(:mod:`snapkv.serving.openai_server`)."""

from __future__ import annotations

import signal
import threading

from . import batch
from .arguments import Formatter, int_in, model_argument
from .locate import FIXTURE
from .messages import CLIError, progress, show


def add_parser(commands, common_options, compaction):
    p = commands.add_parser(
        "serve", parents=[common_options, compaction], formatter_class=Formatter,
        help="serve the model over the OpenAI HTTP API (continuous batching)",
        description="Loads MODEL once (rewritten with the compaction options, or with "
                    "--full-cache kept whole) and serves it over the OpenAI HTTP API: POST "
                    "/v1/completions and /v1/chat/completions (with \"stream\": true as "
                    "server-sent events; greedy with \"temperature\": 0, else sampled with "
                    "temperature/top_p/seed; max_tokens, stop), GET /v1/models and GET "
                    "/health. A request may choose its own SnapKV settings with the extra "
                    "body field \"snapkv\" (\"full\", or an object such as {\"capacity\": "
                    "256}), compiled on first use (at most --max-models settings). Requests "
                    "run together as long as their caches fit in --cache-budget; others wait "
                    "in a queue of --max-queue (then 503). SIGTERM or Ctrl-C drains: new "
                    "requests get 503, the running ones finish, then the server exits 0. "
                    "Binds 127.0.0.1 unless --host says otherwise (docs/serving.md).",
        epilog="examples:\n"
               "  snapkv serve smollm2-135m-instruct --capacity 256 --port 8000\n"
               "  curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' "
               "\\\n    -d '{\"prompt\": \"The capital of France is\", \"max_tokens\": 8, "
               "\"temperature\": 0}'")
    model_argument(p, checkpoints=True)
    batch.add_engine_options(p)
    group = p.add_argument_group("server")
    group.add_argument("--host", default="127.0.0.1",
                       help="address to bind (0.0.0.0: every interface)")
    group.add_argument("--port", type=int_in(0, "--port", 65535), default=8000,
                       help="TCP port (0: any free one, printed on stderr)")
    group.add_argument("--served-model-name", metavar="NAME",
                       help="the model's id in the API (default: MODEL as given)")
    group.add_argument("--default-max-tokens", type=int_in(1, "--default-max-tokens"),
                       default=16, metavar="N",
                       help="max_tokens of a request that gives none (OpenAI's default: 16)")
    group.add_argument("--max-models", type=int_in(1, "--max-models"), default=4,
                       metavar="N", help="SnapKV settings compiled at most, at least 2 (the "
                                         "server's, the full cache for prompts shorter than "
                                         "the window, and those requests name)")
    group.add_argument("--max-body", type=int_in(1, "--max-body"), default=1 << 20,
                       metavar="BYTES", help="request bodies larger than this get 400")
    group.add_argument("--max-connections", type=int_in(1, "--max-connections"),
                       default=256, metavar="N",
                       help="open connections at most (one thread each); more are closed at "
                            "once")
    group.add_argument("--grace", type=float, default=300.0, metavar="S",
                       help="seconds a SIGTERM waits for the running requests")
    group.add_argument("--log-requests", action="store_true",
                       help="one line per HTTP request on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..serving.openai_server import make_server, serve

    # A known model by its name (MODEL was resolved to its converted checkpoint).
    name = args.served_model_name or (show(args.model) if args.model
                                      else FIXTURE.removesuffix(".mlir"))
    try:
        server = make_server(None, args.host, args.port, name=name,
                             default_max_tokens=args.default_max_tokens,
                             max_body=args.max_body, max_connections=args.max_connections,
                             log=(lambda m: progress(False, m)) if args.log_requests else None)
    except OSError as error:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}") \
            from None
    try:
        engine = batch.load_engine(args, per_request=True, max_models=args.max_models)
    except BaseException:
        server.server_close()
        raise
    server.engine = engine
    engine.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    host, port = server.server_address[:2]
    progress(False, f"serving {name} ({engine.served.label}) on http://{host}:{port} "
                    f"(cache budget {engine.cache_budget / 2**20:.0f} MiB); SIGTERM or Ctrl-C "
                    f"stops")
    drained = serve(server, stop, args.grace)
    progress(False, "drained; stopped" if drained else
             f"stopped after {args.grace} s with requests still running")
    return 0 if drained else 1
