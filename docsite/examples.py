"""The fenced examples of the README and the docs, as the test suite runs them
(``tests/docs/test_examples.py``).

A ``bash`` (or ``sh``, ``shell``) or ``python`` block is an example: it runs, in page order,
in one working directory per page, against a live ``qkv serve``. A block that cannot run
there says why on the line before its fence, ``<!-- not run: REASON -->`` (it starts the
service itself, needs ``../shared/data``, trains for hours, needs Docker...). Blocks in
other languages (``text``, ``json``, ``yaml``, ``console``) are shown, not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL = {"bash", "sh", "shell"}
RUN = SHELL | {"python"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>.*?)\s*-->")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "bash" or "python"
    code: str
    not_run: str | None  # the reason, for a block that is shown but not run

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> list[Example]:
    """Every runnable-language fenced block of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        lang = (m["info"].split() or [""])[0].lower()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        if lang not in RUN:
            continue
        before = [ln for ln in lines[max(0, start - 3):start] if ln.strip()]
        why = NOT_RUN.search(before[-1]) if before else None
        found.append(Example(path, start + 1, "bash" if lang in SHELL else "python",
                             "\n".join(body) + "\n", why["why"] if why else None))
    return found


def pages(root: Path) -> list[Path]:
    """The README and every hand-written page under ``docs/``."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
