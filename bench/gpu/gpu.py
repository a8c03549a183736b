"""gradverify on a CUDA machine, in one run: verdicts on CUDA against the CPU, Triton kernels
compiled for the GPU (the suite's own and liger-kernel's), and speed against bare torch.

Run from the repository root, with gradverify installed, on a machine with CUDA::

    python bench/gpu/gpu.py [--device cuda] [--quick]

``--device cpu:0`` runs every step on the CPU (the device check compares cpu:0 with cpu), which
is how this script is tried on a machine without CUDA; ``--quick`` leaves out the zoo and the
speed step there. liger-kernel is used where it imports (carry its wheel to the GPU machine).
Prints what it finds; exits 1 when an expectation below does not hold.

1. Verdicts: the bundled specs, ``specs/broken`` and the test zoo (``tests/zoo``: broken,
   correct and the hard correct corpus), each on the CPU and on the device, side by side. They
   must agree check by check, but for the checks that run only on an accelerator (``device``)
   and those whose dtype is the device's (``autocast``: bfloat16 on the CPU, float16 on CUDA).
   ``device`` must pass on the correct Functions and catch ``device_bugs.py``'s. The device
   zoo (``tests/zoo/placement.py``) is judged apart: on the CPU, ``placement`` catches each
   bug and passes each look-alike; on the device, each bug fails the run and each look-alike
   passes, which confirms the CPU's verdicts.
2. Triton: the suite's Triton zoo (``tests/triton_test.py``'s documents), compiled, with the
   same expectations as under the interpreter; liger-kernel's RMSNorm, LayerNorm, SwiGLU,
   GeGLU, cross-entropy and RoPE Functions (``liger.yaml``), and two planted bugs in copies of
   two of them, each to be caught by ``reference`` naming the input.
3. Speed: whole commands, median of 3, against the bare torch calls on the same inputs; on
   CUDA all default checks must stay within ``CUDA_BAR`` of the bare gradcheck + gradgradcheck
   script, as on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TESTS = ROOT / "tests"
PY = sys.executable
DEVICE_ONLY = {"device", "interpreter", "placement"}
"""Rows only one side judges: ``device`` runs on an accelerator, ``interpreter`` under Triton's
interpreter, ``placement`` on the CPU (as if on a GPU; on the device itself it skips)."""
DTYPE_OF_DEVICE = {"autocast"}
"""Checks that run in the device's own low dtype, so may differ by design."""
PLANTED = {  # liger module: (its source text, the bug put in its place, the input named)
    "rms_norm": ("dX_row = rstd_row * m", "dX_row = m", "X"),
    "layer_norm": ("db = dy_f32\n", "db = dy_f32 * x_hat\n", "B"),
}
CUDA_BAR = 1.15
"""All default checks against the bare script, on CUDA (the CPU's bars are bench.py's)."""
failures: list[str] = []
internal: dict[str, str] = {}
"""Tracebacks of gradverify's own errors (GV011), by their last line."""


def keep_traceback(finding: dict[str, Any]) -> None:
    text = (finding.get("evidence") or {}).get("traceback") or ""
    if finding["code"] in ("GV010", "GV011") and text:
        internal.setdefault(text.strip().splitlines()[-1], text)


def expect(ok: bool, what: str) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def environment(*paths: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "NO_COLOR": "1", **extra}


def check_json(args: list[str], cwd: Path, env: dict[str, str] | None = None,
               timeout: int = 400) -> dict[str, Any]:
    """The JSON report of ``gradverify check ARGS --format json``."""
    done = subprocess.run([PY, "-m", "gradverify", "check", *args, "--format", "json"],
                          cwd=cwd, env=env or environment(), capture_output=True, text=True,
                          timeout=timeout)
    if not done.stdout.strip():
        raise RuntimeError(f"gradverify check {' '.join(args)} exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def by_row(report: dict[str, Any]) -> dict[str, dict[str, tuple[str, list[str]]]]:
    """``target :: case`` -> check -> (status, codes of its findings)."""
    for r in report["results"]:
        for c in r["checks"]:
            for f in c["findings"]:
                keep_traceback(f)
    for e in report.get("errors", []):
        print(f"  run error: {e}")
    return {f"{r['target']} :: {r['case']}": {
        c["name"]: (c["status"], sorted({f["code"] for f in c["findings"]}))
        for c in r["checks"]} for r in report["results"]}


def verdict(checks: dict[str, tuple[str, list[str]]]) -> str:
    statuses = {s for s, _ in checks.values()}
    for status in ("error", "fail", "warn", "xfail", "pass", "skip"):
        if status in statuses:
            return status
    return "-"


def compare(name: str, cpu: dict[str, dict[str, tuple[str, list[str]]]],
            dev: dict[str, dict[str, tuple[str, list[str]]]], device: str) -> None:
    """Print both runs side by side and the checks whose verdicts differ."""
    print(f"\n{name}: {len(cpu)} cases, cpu | {device}")
    differ = 0
    for row in sorted(set(cpu) | set(dev)):
        a, b = cpu.get(row, {}), dev.get(row, {})
        diffs = [f"{check}: {a.get(check, ('-',))} -> {b.get(check, ('-',))}"
                 for check in sorted(set(a) | set(b))
                 if check not in DEVICE_ONLY | DTYPE_OF_DEVICE
                 and a.get(check, ("-", []))[0] != b.get(check, ("-", []))[0]]
        differ += bool(diffs)
        extra = [f"{c}: {b[c][0]}" for c in sorted(DEVICE_ONLY | DTYPE_OF_DEVICE) if c in b]
        print(f"  {verdict(a):6} | {verdict(b):6}  {row}" + (f"  [{', '.join(extra)}]"
                                                             if extra else "")
              + "".join(f"\n      DIFFERS {d}" for d in diffs))
    expect(differ == 0, f"{name}: the same verdict on cpu and {device}, check by check "
                        f"({differ} of {len(cpu)} cases differ)")


def zoo_rows(device: str, part: int, parts: int, only: frozenset[str] = frozenset()
             ) -> dict[str, dict[str, tuple[str, list[str]]]]:
    """Every zoo Function's first case (those named in ``only``, if any), through ``verify()``
    on ``device`` (run in a child), in the order of their names."""
    sys.path.insert(0, str(TESTS))
    import zoo
    from gradverify import verify

    rows = {}
    every = sorted({*zoo.BROKEN, *zoo.CORRECT, *zoo.HARD}, key=lambda c: c.__name__)
    for cls in [c for c in every if not only or c.__name__ in only][part::parts]:
        report = verify(cls, spec=cls.SPEC, device=device)
        if report.errors:
            rows[cls.__name__] = {"(run)": ("error", [str(e) for e in report.errors])}
            continue
        first = report.results[0]
        for c in first.checks:
            for f in c.findings:
                if f.evidence.traceback and f.code in ("GV010", "GV011"):
                    rows.setdefault("(traceback)", {})[f.code] = ("", [f.evidence.traceback])
        rows[cls.__name__] = {c.name: (c.status.value, sorted({f.code for f in c.findings}))
                              for c in first.checks}
        if cls not in zoo.BROKEN:
            rows[cls.__name__]["(correct)"] = ("", [])
        if cls.__module__ == "zoo.placement":
            rows[cls.__name__]["(placement zoo)"] = ("", list(getattr(cls, "EXPECT", ())[1:2]))
    return rows


def zoo_on(device: str, parts: int = 6, only: str = ""
           ) -> dict[str, dict[str, tuple[str, list[str]]]]:
    def one(part: int) -> dict[str, Any]:
        done = subprocess.run([PY, __file__, "--zoo-part", device, str(part), str(parts),
                               "--zoo", only],
                              capture_output=True, text=True, timeout=500, cwd=ROOT,
                              env=environment(OMP_NUM_THREADS="2"))
        if done.returncode:
            raise RuntimeError(f"zoo part {part} on {device}: {done.stderr[-2000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    rows: dict[str, Any] = {}
    with ThreadPoolExecutor(parts) as pool:
        for part in pool.map(one, range(parts)):
            for _, (_, (text,)) in part.pop("(traceback)", {}).items():
                internal.setdefault(text.strip().splitlines()[-1], text)
            rows.update(part)
    return {name: {c: (s, codes) for c, (s, codes) in checks.items()}
            for name, checks in rows.items()}


def step_verdicts(device: str, quick: bool, only: str = "") -> None:
    print("\n== 1. verdicts on the CPU and on", device)
    for name, args in (("bundled specs (specs/)", []), ("specs/broken", ["specs/broken"])):
        with ThreadPoolExecutor(2) as pool:
            cpu, dev = pool.map(lambda d, a=args: by_row(check_json([*a, "--device", d], ROOT)),
                                ["cpu", device])
        compare(name, cpu, dev, device)
    if not quick:
        parts = 6 if not only else 1  # named ones: in one process, in order
        with ThreadPoolExecutor(2) as pool:
            cpu, dev = pool.map(lambda d: zoo_on(d, parts, only), ["cpu", device])
        device_zoo(cpu, dev, device)
        compare("the zoo (tests/zoo: broken, correct, hard correct)", cpu, dev, device)
        passed = [n for n, checks in dev.items() if checks.get("device", ("-",))[0] == "pass"]
        bad = [n for n, checks in dev.items()
               if checks.get("device", ("pass",))[0] not in ("pass", "skip")]
        correct = {n for n, checks in dev.items() if checks.pop("(correct)", None)}
        print(f"  device check on the zoo: {len(passed)} pass; not passing: {bad}")
        expect(not correct & set(bad), f"the device check passes (or skips) on all "
                                       f"{len(correct)} correct Functions of the zoo")
    spec = HERE / "device_bugs.yaml"
    rows = by_row(check_json([str(spec), "--device", device], HERE, environment(HERE)))
    print("\n  device_bugs.py on", device)
    for row, checks in sorted(rows.items()):
        shown = {c: v for c, v in checks.items() if c in ("gradcheck", "device")}
        print(f"    {verdict(checks):6} {row}  {shown}")
    found = {row.split(":")[1].split(" ")[0]: checks for row, checks in rows.items()}
    expect(found["Scale3"]["device"][0] == "pass", "the correct Scale3 passes the device check")
    for bug in ("Scale3DropsFactorInCudaBackward", "Scale3DropsFactorOnCuda"):
        expect(found[bug]["device"] == ("fail", ["GV341"]), f"{bug}: device fails, GV341")
    expect(found["Scale3DropsFactorOnCuda"]["gradcheck"][0] == "pass",
           "Scale3DropsFactorOnCuda: gradcheck on the device alone cannot see it")


def device_zoo(cpu: dict[str, Any], dev: dict[str, Any], device: str) -> None:
    """The device zoo's rows, taken out of ``cpu`` and ``dev``: placement's verdicts on the CPU
    against what the device itself shows."""
    names = sorted(n for n, checks in cpu.items() if "(placement zoo)" in checks)
    print(f"\nthe device zoo (tests/zoo/placement.py): {len(names)} Functions, cpu | {device}")
    for name in names:
        a, b = cpu.pop(name), dev.pop(name, {})
        expected = a.pop("(placement zoo)")[1]
        b.pop("(placement zoo)", None)
        on_cpu = a.get("placement", ("-", []))
        print(f"  {on_cpu[0]:6} {on_cpu[1]} | {verdict(b):6}  {name}")
        if expected:
            expect(on_cpu == ("fail", expected), f"{name}: placement fails on the CPU, "
                                                 f"{expected[0]}")
            expect(verdict(b) in ("fail", "error"), f"{name}: the {device} run fails too")
        else:
            expect(on_cpu[0] == "pass", f"{name}: placement passes on the CPU")
            expect(verdict(b) == "pass", f"{name}: the {device} run passes too")


def triton_documents() -> tuple[list[dict[str, Any]], dict[str, tuple[str, str, str, Any]]]:
    sys.path.insert(0, str(TESTS))
    import triton_test

    return triton_test._documents(), triton_test.BUGS


def step_triton(device: str, folder: Path) -> None:
    import yaml

    interpreted = device == "cpu" or device.startswith("cpu:")
    env = environment(TESTS, HERE, folder, **({"TRITON_INTERPRET": "1"} if interpreted else {}))
    print(f"\n== 2. Triton kernels on {device}"
          f"{' (interpreted)' if interpreted else ', compiled'}")
    documents, bugs = triton_documents()
    (folder / "zoo.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    report = check_json([str(folder / "zoo.yaml"), "--device", device], folder, env)
    print(f"  triton: {report.get('triton')}")
    for row, checks in sorted(by_row(report).items()):
        bad = {c: v for c, v in checks.items() if v[0] in ("fail", "error", "warn")}
        name = row.split(" :: ")[0].rsplit(":", 1)[-1]
        print(f"    {verdict(checks):6} {row}  {bad or ''}")
        if name in bugs:
            _, check, code, _ = bugs[name]
            expect(code in checks.get(check, ("-", []))[1], f"{name}: {check} reports {code}")
        elif "interpreter" not in checks:
            expect(not bad, f"{name}: correct, no failure")
    try:
        import liger_kernel  # noqa: F401
    except ImportError as exc:
        print(f"  liger-kernel: not importable ({exc}); carry its wheel")
        return
    docs = list(yaml.safe_load_all((HERE / "liger.yaml").read_text()))
    for module, (source, bug, _) in PLANTED.items():
        text = Path(__import__(f"liger_kernel.ops.{module}", fromlist=["_"]).__file__
                    ).read_text()
        assert text.count(source) == 1, (module, source)
        (folder / f"liger_planted_{module}.py").write_text(text.replace(source, bug))
        original = next(d for d in docs if d["target"].startswith(f"liger_kernel.ops.{module}:"))
        docs.append({**original, "target": original["target"].replace(
            f"liger_kernel.ops.{module}", f"liger_planted_{module}")})
    (folder / "liger.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    started = time.perf_counter()
    report = check_json([str(folder / "liger.yaml"), "--device", device], folder, env,
                        timeout=500)
    print(f"\n  liger-kernel {liger_kernel_version()} on {device} "
          f"({time.perf_counter() - started:.1f}s):")
    rows = by_row(report)
    for row, checks in sorted(rows.items()):
        bad = {c: v for c, v in checks.items() if v[0] in ("fail", "error", "warn", "xfail")}
        print(f"    {verdict(checks):6} {row}  {bad or ''}")
    for r in report["results"]:
        for c in r["checks"]:
            for f in c["findings"]:
                if f["severity"] in ("error", "warning"):
                    print(f"      {r['target'].split(':')[1]} {f['code']} {c['name']}: "
                          f"{f['message'][:150]}")
    for module, (_, _, name) in PLANTED.items():
        found = [f for r in report["results"] if r["target"].startswith(f"liger_planted_{module}")
                 for c in r["checks"] if c["name"] == "reference" for f in c["findings"]]
        expect(any(f["code"] in ("GV331", "GV332") and f.get("input") == name for f in found),
               f"planted bug in liger's {module}: reference names input {name!r}")


def liger_kernel_version() -> str:
    from importlib.metadata import version

    return version("liger-kernel")


def timed(command: list[str], cwd: Path, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              env=environment(), timeout=300)
        times.append(time.perf_counter() - start)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: "
                               f"{done.stdout[-2500:]}{done.stderr[-1500:]}")
    return statistics.median(times)


def step_speed(device: str, only: str = "", repeat: int = 3) -> None:
    print(f"\n== 3. speed on {device}: whole commands, median of {repeat}")
    bench = ROOT / "bench"
    check = [PY, "-m", "gradverify", "check", "--device", device]
    rows = [
        ("check --only gradcheck,gradgradcheck, small spec",
         [*check, "specs/overhead.yaml", "--only", "gradcheck,gradgradcheck"],
         [PY, "bare_overhead.py", device]),
        ("all default checks, small spec", [*check, "specs/overhead.yaml"],
         [PY, "bare_overhead.py", device]),
        ("all default checks, 1e6 elements", [*check, "specs/million.yaml"],
         [PY, "bare_million.py", device]),
    ]
    print(f"  {'measurement':50} {'ours':>7} {'bare':>7} {'ratio':>6}")
    for label, ours, bare in rows:
        if only not in label:
            continue
        b, o = timed(bare, bench, repeat), timed(ours, bench, repeat)
        print(f"  {label:50} {o:6.2f}s {b:6.2f}s {o / b:5.2f}x")
        if device.startswith("cuda") and label.startswith("all default checks"):
            expect(o / b <= CUDA_BAR, f"{label} on {device}: within {CUDA_BAR}x of the bare "
                                      f"script ({o / b:.2f}x)")


def header(device: str) -> None:
    import torch

    import gradverify

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA"
    try:
        import triton
        tri = triton.__version__
    except ImportError:
        tri = "absent"
    print(f"gradverify {gradverify.__version__} | torch {torch.__version__} | triton {tri} | "
          f"python {platform.python_version()} | {name} | run on {device} | "
          f"{os.cpu_count()} cpus")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", default="1,2,3")
    parser.add_argument("--zoo", default="", help="only these zoo Functions (comma-separated)")
    parser.add_argument("--speed", default="", help="only the speed rows whose label has this")
    parser.add_argument("--repeat", type=int, default=3, help="runs per speed figure")
    parser.add_argument("--zoo-part", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.zoo_part:
        device, part, parts = args.zoo_part
        only = frozenset(filter(None, args.zoo.split(",")))
        print(json.dumps(zoo_rows(device, int(part), int(parts), only)))
        return
    header(args.device)
    steps = set(args.steps.split(","))
    with tempfile.TemporaryDirectory() as folder:
        for step, run in (("1", lambda: step_verdicts(args.device, args.quick, args.zoo)),
                          ("2", lambda: step_triton(args.device, Path(folder))),
                          ("3", lambda: step_speed(args.device, args.speed, args.repeat))):
            if step not in steps or (step == "3" and args.quick):
                continue
            started = time.perf_counter()
            try:
                run()
            except Exception as exc:  # noqa: BLE001 -- report and go on to the next step
                failures.append(f"step {step} raised {type(exc).__name__}: {exc}")
                print(f"  FAIL step {step} raised {type(exc).__name__}: {exc}")
            print(f"  (step {step}: {time.perf_counter() - started:.0f}s)", flush=True)
    for text in list(internal.values())[:6]:
        print("\ngradverify's own error (GV011):\n" + "\n".join(text.splitlines()[-14:]))
    print(f"\n{len(failures)} expectation(s) not met" + "".join(f"\n  {f}" for f in failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
