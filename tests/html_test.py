"""``--format html``: one self-contained page; its heatmaps are PNGs in ``data:`` URIs."""
from __future__ import annotations

import base64
import dataclasses
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser

import pytest

from conftest import run_cli
from gradverify.report import RENDERERS, heatmap
from gradverify.results import (
    CaseResult,
    CheckResult,
    ErrorEntry,
    Evidence,
    Finding,
    JacobianBlock,
    Location,
    Report,
    ReportSettings,
    Severity,
    Status,
)

HOSTILE = "<script>alert('x')</script>&\""


def _block(rows: int, cols: int, *, truncated: bool = False) -> JacobianBlock:
    return JacobianBlock(
        "output 0", "x",
        tuple(tuple(float(r == c) for c in range(cols)) for r in range(rows)),
        tuple(tuple(0.0 for _ in range(cols)) for _ in range(rows)),
        tuple((r,) for r in range(rows)), tuple((c,) for c in range(cols)),
        truncated=truncated)


def _report(block: JacobianBlock | None = None, target: str = "pkg.ops:F") -> Report:
    evidence = Evidence(blocks=(block,) if block else ())
    bad = Finding("GV121", Severity.ERROR, f"gradient for 'x' is wrong: {HOSTILE}",
                  input="x", hint=f"fix {HOSTILE}", location=Location("pkg/ops.py", 42),
                  evidence=evidence)
    checks = (CheckResult("contract", Status.PASS, 0.1, "ok"),
              CheckResult("gradcheck", Status.FAIL, 0.25, "mismatch", (bad,)))
    case = CaseResult(target, "specs/f.yaml", f"basic {HOSTILE}", Status.FAIL, 0.4,
                      checks=checks)
    error = ErrorEntry(None, "specs/bad.yaml", "GV002", f"bad {HOSTILE}",
                       location=Location("specs/bad.yaml", 3))
    return Report(ReportSettings(), (case,), (error,), duration_s=1.0)


class _Page(HTMLParser):
    """The tags of a page: every <img>'s attributes, the text of every table row's cells."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.rows: list[list[str]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open.append(tag)
        if tag == "img":
            self.images.append(dict(attrs))
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG, after checking its signature, chunk CRCs and pixel data."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    assert list(chunks)[-1] == b"IEND"
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2)  # 8-bit RGB
    assert len(zlib.decompress(chunks[b"IDAT"])) == height * (1 + 3 * width)
    return width, height


@pytest.mark.parametrize(("rows", "cols"), [(5, 5), (3, 7), (32, 32), (1, 1)])
def test_a_failing_block_is_an_img_whose_data_uri_is_a_png_of_its_size(rows, cols):
    block = _block(rows, cols)
    page = _parse(RENDERERS["html"].render(_report(block)))
    (image,) = page.images
    prefix = "data:image/png;base64,"
    assert str(image["src"]).startswith(prefix)
    side = heatmap.side(block)
    size = _png_size(base64.b64decode(str(image["src"])[len(prefix):]))
    assert size == (cols * side, rows * side)
    assert (image["width"], image["height"]) == (str(cols * side), str(rows * side))
    assert "|analytical - numerical| of output 0 with respect to 'x'" in str(image["alt"])


def test_no_image_without_a_block_and_a_truncated_block_says_so():
    assert _parse(RENDERERS["html"].render(_report())).images == []
    text = RENDERERS["html"].render(_report(_block(32, 32, truncated=True)))
    assert "the 32 rows and 32 columns with the largest differences" in text


def test_user_text_is_escaped_and_nothing_is_fetched():
    text = RENDERERS["html"].render(_report(_block(2, 2), target=f"pkg:{HOSTILE}"))
    assert "<script" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert "http" not in text.lower()
    page = _parse(text)
    assert all(str(i["src"]).startswith("data:") for i in page.images)
    assert "link" not in page.open and "script" not in page.open
    # the escaped text reads back as the user's own
    assert f"pkg:{HOSTILE}" in page.rows[1] and f"basic {HOSTILE}" in page.rows[1]


HEADER = ["target", "spec", "case", "check", "status", "duration"]


def test_the_case_table_has_a_row_per_check_the_passing_ones_folded():
    text = RENDERERS["html"].render(_report(_block(2, 2)))
    page = _parse(text)
    assert page.rows == [HEADER, page.rows[1], HEADER, page.rows[3]]
    assert [page.rows[1][3:], page.rows[3][3:]] == [["gradcheck", "fail", "0.25s"],
                                                    ["contract", "pass", "0.10s"]]
    folded = text[text.index("<details>"):text.index("</details>")]
    assert "1 passing check</summary>" in folded and ">contract<" in folded
    assert ">gradcheck<" not in folded
    text = " ".join("".join(page.text).split())
    assert f"pkg/ops.py:42: error: gradient for 'x' is wrong: {HOSTILE} [GV121 gradcheck]" in text
    assert f"specs/bad.yaml:3: GV002 bad {HOSTILE}" in text


def test_the_page_opens_on_the_summary_and_the_failures_each_linked_to_its_finding():
    text = RENDERERS["html"].render(_report(_block(2, 2)))
    order = [text.index(part) for part in ('class="summary"', "exit status 3", "<h2>Failing",
                                           '<div class="finding error" id="f1">',
                                           "<h2>Cases", "<details>")]
    assert order == sorted(order)
    failing = text[text.index("<h2>Failing"):text.index("<h2>Findings")]
    assert '<a href="#f1">gradcheck</a>' in failing and "pkg.ops:F" in failing
    table = text[text.index("<h2>Cases"):]
    assert '<td><a href="#f1">gradcheck</a></td>' in table


@pytest.fixture
def sign_flip(project):
    project.write("flipops.py", """
        import torch
        from torch.autograd import Function

        class Flip(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 3

            @staticmethod
            def backward(ctx, grad):
                return -3 * grad
    """)
    project.write("specs/flip.yaml", "target: flipops:Flip\ncases:\n  - args: {x: {shape: [4]}}\n")
    return project


def test_html_report_to_a_file(sign_flip):
    result = run_cli("check", "--only", "gradcheck", "--format", "html", "--output", "r.html")
    assert result.code == 1, result.output
    page = _parse((sign_flip.root / "r.html").read_text(encoding="utf-8"))
    (row,) = [row for row in page.rows[1:] if row[3] == "gradcheck"]
    assert row[:2] == ["flipops:Flip", "specs/flip.yaml"] and row[4] == "fail"
    (image,) = page.images
    assert _png_size(base64.b64decode(str(image["src"]).split(",", 1)[1])) == (4 * 32, 4 * 32)


def _browser() -> str | None:
    """A headless browser that starts here (one installed but unable to start, as in a
    container without its libraries, is none: the tests skip)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            started = subprocess.run([path, "--headless", "--no-sandbox", "--disable-gpu",
                                      "--dump-dom", "about:blank"], capture_output=True,
                                     timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if started.returncode == 0 and b"<html" in started.stdout:
            return path
    return None


BROWSER = _browser()


@pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) that starts here")
def test_a_browser_renders_the_table_and_the_images(tmp_path):
    path = tmp_path / "report.html"
    path.write_text(RENDERERS["html"].render(_report(_block(3, 4))), encoding="utf-8")
    dom = subprocess.run([str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", path.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    page = _parse(dom)
    assert [row[3:5] for row in page.rows if row != HEADER] == [["gradcheck", "fail"],
                                                                ["contract", "pass"]]
    (image,) = page.images
    assert str(image["src"]).startswith("data:image/png;base64,")
    assert "<script" not in dom


@pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) that starts here")
def test_the_first_screen_shows_the_failures(tmp_path):
    """As people see it: in a 1280x800 window, the first finding starts on the first screen,
    however many passing checks the run had (a copy of the page measures itself; the report
    has no script)."""
    report = _report(_block(3, 4))
    many = tuple(CheckResult(f"check{i}", Status.PASS, 0.1, "ok") for i in range(300))
    report = dataclasses.replace(report, results=(dataclasses.replace(
        report.results[0], checks=many + report.results[0].checks),))
    text = RENDERERS["html"].render(report)
    assert "<script" not in text
    measure = ("<script>document.title = String(Math.round(document.getElementById('f1')"
               ".getBoundingClientRect().top));</script></body>")
    path = tmp_path / "report.html"
    path.write_text(text.replace("</body>", measure), encoding="utf-8")
    dom = subprocess.run([str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu",
                          "--window-size=1280,800", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    top = re.search(r"<title>(\d+)</title>", dom)
    assert top is not None and int(top.group(1)) < 800, dom[:500]
    shot = tmp_path / "first-screen.png"
    subprocess.run([str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu",
                    "--window-size=1280,800", f"--screenshot={shot}", path.as_uri()],
                   capture_output=True, timeout=120, cwd=tmp_path)
    assert shot.is_file() and _png_signature(shot.read_bytes())


def _png_signature(data: bytes) -> bool:
    return data[:8] == b"\x89PNG\r\n\x1a\n"
