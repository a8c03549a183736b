"""What the composition checks cost per target: `gradverify check` of one small spec with the
default checks (``func``, torch.func.vjp and torch.func.grad, is one of them), against the same
with ``--compose`` (adding ``compile``: torch.compile as users compile with the aot_eager and
inductor backends, and torch.compile of torch.func.grad and torch.func.jvp; and ``autocast``),
with ``--compose --skip compile`` (autocast alone), and against the default checks without
``func``. ``--compose`` twice: with inductor's cache of compiled C++ warm (its own folder,
filled by a first run that is not timed) and cold (an empty folder each run, as on a fresh CI
machine). Whole commands, alternating runs so that all see the same load; one worker
(``-j 1``). Prints the medians and what each adds per target:
`python bench/compose.py [REPEAT]`.

`python bench/compose.py cells` reports every cell of the composition corpus instead: each
Function of the test zoo's composition modules (``tests/zoo/func.py``, ``compile.py``,
``autocast.py``: defects that show only when composed, and correct look-alikes) under
``--compose``, the status and codes of each composition check (func, compile with aot_eager,
autocast), and whether the defect was caught by its own check, missed, or a correct Function
failed (``false``; ``torch`` where only torch.compile of a torch.func transform is at fault,
GV354/GV355); then the counts.

The spec is ``specs/compose.yaml``: ``ops:Softplus`` in setup_context style (so every
composition applies), one case."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def once(*flags: str, cache: str | None = None) -> float:
    """One whole command; ``cache``: inductor's folder of compiled code (None: an empty one)."""
    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gradverify", "check", "--format", "plain", "-j",
                        "1", "specs/compose.yaml", *flags], cwd=HERE, check=True,
                       stdout=subprocess.DEVNULL,
                       env={**os.environ, "NO_COLOR": "1",
                            "TORCHINDUCTOR_CACHE_DIR": cache or empty})
        return time.perf_counter() - start


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    runs: dict[str, list[float]] = {
        "default checks but func": [], "default checks": [], "--compose --skip compile": [],
        "--compose, inductor warm": [], "--compose, inductor cold": []}
    with tempfile.TemporaryDirectory() as warm:
        once("--compose", cache=warm)  # fills the warm cache; not timed
        for _ in range(repeat):
            runs["default checks but func"].append(once("--skip", "func", cache=warm))
            runs["default checks"].append(once(cache=warm))
            runs["--compose --skip compile"].append(once("--compose", "--skip", "compile",
                                                         cache=warm))
            runs["--compose, inductor warm"].append(once("--compose", cache=warm))
            runs["--compose, inductor cold"].append(once("--compose"))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    base = medians["default checks but func"]
    for name, median in medians.items():
        added = median - base
        print(f"{name:28s} {median:6.2f}s  {median / base:5.2f}x  +{added:5.2f}s per target")


COMPOSITIONS = ("func", "compile", "autocast")
TORCH_AT_FAULT = {"GV354", "GV355"}
"""The codes by which a Function right in eager fails because this torch compiles a transform of
it wrongly (judged against eager where eager is right; tests/trust_test.py checks each against
bare torch): counted as ``torch``, not as a false failure."""


def cells() -> None:
    """Every cell of the composition corpus, and the counts (in-process, inductor off)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import importlib

    from gradverify import verify
    from gradverify.results import Status

    counts = {"caught": 0, "missed": 0, "false": 0, "torch": 0, "correct": 0}
    print(f"{'target':28} {'expected':22} " + " ".join(f"{c:18}" for c in COMPOSITIONS)
          + " verdict")
    for module in COMPOSITIONS:
        zoo = importlib.import_module(f"zoo.{module}")
        for name, cls in list(vars(zoo).items()):
            if not isinstance(cls, type) or cls.__module__ != zoo.__name__ \
                    or not hasattr(cls, "SPEC"):
                continue
            spec = {**cls.SPEC, "checks": {**cls.SPEC.get("checks", {}),
                                           "compile": {"inductor": False}}}
            report = verify(cls, spec=spec, checks=COMPOSITIONS, compose=True)
            rows = {c.name: c for case in report.results for c in case.checks}
            said = [f"{rows[c].status.value}"
                    + "".join(f" {f.code}" for f in rows[c].findings if f.severity.value
                              != "info") if c in rows else "-" for c in COMPOSITIONS]
            expect = getattr(cls, "EXPECT", None)
            if expect:
                check, code, _ = expect
                hit = check in rows and any(f.code == code for f in rows[check].findings)
                verdict = "caught" if hit else "missed"
            else:
                failed = [r for r in rows.values() if r.status in (Status.FAIL, Status.ERROR)]
                failing = {f.code for r in failed for f in r.findings
                           if f.severity.value == "error"}
                verdict = "correct" if not failed else \
                    "torch" if failing and failing <= TORCH_AT_FAULT else "false"
            counts[verdict] += 1
            print(f"{name:28} {(expect[0] + ' ' + expect[1]) if expect else 'correct':22} "
                  + " ".join(f"{c:18}" for c in said) + f" {verdict}")
    print(", ".join(f"{n} {k}" for k, n in counts.items()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["cells"]:
        cells()
    else:
        main()
