"""|analytical - numerical| of a Jacobian block as a picture, drawn from a finding's evidence
(``results.JacobianBlock``): as text shades for the console, as a PNG for the HTML report. The
checks hand over numbers only; what is drawn, and how small, is decided here."""
from __future__ import annotations

import math
import struct
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradverify.results import JacobianBlock

SHADES = " .:-=+*#%@"
"""From no difference to the block's largest."""
TEXT_ROWS = 8
TEXT_COLS = 32
"""The text heatmap's most rows and columns: larger blocks show each cell's largest entry."""


def differences(block: JacobianBlock) -> list[list[float]]:
    """|analytical - numerical| per entry; a non-finite one (NaN from 0 * inf in backward, say)
    counts as the block's largest finite difference, so that it shows as the worst."""
    errors = [[math.inf if math.isnan(e) else e for e in row] for row in block.errors()]
    finite = [e for row in errors for e in row if math.isfinite(e)]
    worst = max(finite) if finite else 1.0
    return [[e if math.isfinite(e) else worst for e in row] for row in errors]


def scaled(block: JacobianBlock) -> list[list[float]]:
    """The differences divided by the largest: 0 (none) to 1 (the worst)."""
    values = differences(block)
    top = max((e for row in values for e in row), default=0.0) or 1.0
    return [[e / top for e in row] for row in values]


def text(block: JacobianBlock, max_rows: int = TEXT_ROWS, max_cols: int = TEXT_COLS
         ) -> list[str]:
    """One string of ``SHADES`` per row of cells; rows are output elements, columns input
    elements, each cell the largest of the entries it covers."""
    values = scaled(block)
    rows, cols = len(values), len(values[0]) if values else 0
    rh = math.ceil(rows / max_rows) if rows > max_rows else 1
    cw = math.ceil(cols / max_cols) if cols > max_cols else 1
    lines = []
    for r0 in range(0, rows, rh):
        line = []
        for c0 in range(0, cols, cw):
            v = max(e for row in values[r0:r0 + rh] for e in row[c0:c0 + cw])
            line.append(SHADES[min(len(SHADES) - 1, round(v * (len(SHADES) - 1)))])
        lines.append("".join(line))
    return lines


IMAGE_SIDE = 192
"""About how many pixels the PNG's longer side has: an entry is a square of ``side`` pixels."""


def side(block: JacobianBlock) -> int:
    """The side in pixels of one entry's square: 6 (32 entries a side) to 32 (1 to 6)."""
    entries = max(len(block.analytical), len(block.analytical[0]) if block.analytical else 0)
    return max(6, min(32, IMAGE_SIDE // max(1, entries)))


def png(block: JacobianBlock, pixels: int | None = None) -> bytes:
    """The block as an RGB PNG, ``pixels`` (default ``side``) square per entry: white for no
    difference to dark red for the largest. Written with zlib and struct (no imaging library).
    """
    pixels = pixels or side(block)
    values = scaled(block)
    rows, cols = len(values), len(values[0]) if values else 0
    raw = bytearray()
    for row in values:
        line = bytearray()
        for v in row:
            line += bytes(_colour(v)) * pixels
        raw += (b"\x00" + bytes(line)) * pixels  # filter type 0 per scanline
    header = struct.pack(">IIBBBBB", cols * pixels, rows * pixels, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + _chunk(b"IEND", b""))


def _colour(v: float) -> tuple[int, int, int]:
    """White (0) through red to dark red (1)."""
    v = min(1.0, max(0.0, v))
    if v <= 0.5:
        fade = round(255 * (1 - 2 * v))
        return 255, fade, fade
    return round(255 - 120 * (2 * v - 1)), 0, 0


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
