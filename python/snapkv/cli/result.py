"""What a command computed, kept apart from how it is shown (issue 31): each command's
``run`` computes one result object first, then renders it as text or, with ``--json``, as
JSON, both from that object only, so the two renderings cannot disagree and the computing
code prints nothing but progress lines on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, TextIO


class Result:
    """A command's result: :meth:`to_json` is what ``--json`` prints, :meth:`render_text`
    the text a person reads (without a final newline)."""

    def to_json(self) -> Any:
        raise NotImplementedError

    def render_text(self) -> str:
        raise NotImplementedError


def json_text(result: Result) -> str:
    """The JSON every command prints (indent 1), without a final newline."""
    return json.dumps(result.to_json(), indent=1)


def emit(result: Result, as_json: bool, out: Optional[TextIO] = None):
    """Print `result` on `out` (stdout by default) as JSON or as text (nothing for an empty
    text)."""
    text = json_text(result) if as_json else result.render_text()
    if as_json or text:
        print(text, file=out if out is not None else sys.stdout)
