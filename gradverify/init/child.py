"""The child process of ``init.bounded`` (``python -m gradverify.init.child``): drafts each
requested target's spec, saying which one it is on. What the user's code prints goes to stderr;
the answers, one JSON line each, go to the original stdout."""
from __future__ import annotations

import json
import os
import sys

from gradverify.init import spec_for
from gradverify.init.targets import find
from gradverify.syspath import ensure_cwd_on_path
from gradverify.torchstate import import_torch, warm_up


def serve() -> None:
    # the request first, before any import: the parent writes it whole before it waits on
    # any deadline
    request = json.loads(sys.stdin.read())
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import_torch()  # before the first "start": a target's deadline is for its own probe
    warm_up(checkpoint=True)  # the header's mutation score runs every default check
    ensure_cwd_on_path()
    for index, item in enumerate(request):
        print(json.dumps({"start": index}), file=answers, flush=True)
        try:
            (one, *_), _ = find(item["target"], tuple(item["imports"]))
        except Exception:  # noqa: BLE001 -- not importable here: the parent drafts it
            print(json.dumps({"done": index, "written": None}), file=answers, flush=True)
            continue
        written = spec_for(one.info, spec_path=item["path"], imports=one.imports)
        print(json.dumps({"done": index, "written": vars(written)}), file=answers, flush=True)


if __name__ == "__main__":
    serve()
