"""The HTML tables' shared look: one scroll box and one table style, so every tab's table reads alike."""
from __future__ import annotations

SCROLL = "max-height:440px;overflow:auto;border:1px solid #eee"


def table_css(name: str, cells: str, rows: str = "") -> str:
    """A <style> for tables of class ``name``: 12 px cells top-aligned with ``cells`` added, a header that stays in
    view while the box scrolls, a red failed row, and ``rows`` (more rules, written in full)."""
    return (f"<style>.{name} td{{{cells}vertical-align:top;font-size:12px}}"
            f".{name} th{{position:sticky;top:0;background:#fafafa;font-size:12px}}"
            f".{name} tr.failed td{{color:#9d0208}}{rows}</style>")
