"""The v1 start message's ``second_pass`` field (sans-I/O session): absent, the server's default (the engine's);
true or false; true on a server without a second-pass model, or not a boolean, is a bad_message error."""

from __future__ import annotations

import json

from streamd.config import LimitsConfig
from streamd.server.protocol import Open, Send, V1Session

INFO = {"name": "tiny", "methods": ["greedy"], "chunk_seconds": 0.16}


def start(info, **fields):
    s = V1Session("s", LimitsConfig(), info)
    return s.receive(json.dumps({"type": "start", **fields}), 0.0)


def test_second_pass_start_field():
    with_model = {**INFO, "second_pass": "moonshine-base"}
    (op,) = start(with_model)
    assert isinstance(op, Open) and "second_pass" not in op.options  # the engine's default: on
    (op,) = start(with_model, second_pass=False)
    assert op.options["second_pass"] is False
    (op,) = start(with_model, second_pass=True)
    assert op.options["second_pass"] is True
    (op,) = start(INFO, second_pass=False)
    assert op.options["second_pass"] is False
    for info, value, msg in ((INFO, True, "no second-pass model"), (with_model, 1, "must be true or false")):
        acts = start(info, second_pass=value)
        err = [a.message for a in acts if isinstance(a, Send)]
        assert err and err[0]["type"] == "error" and err[0]["code"] == "bad_message" and msg in err[0]["message"]
