"""Document files for the bulk job: plain text, Markdown, HTML and PDF, a file a document.

A folder given as input stands for every file under it with a known suffix (these and the
row formats of :mod:`index.bulk.corpus`), in sorted order, so that a rerun walks them in
the same order and resumes where it stopped. A document's id is its path under the folder
(its name when the file was given itself); its metadata names the file and its format.
The text keeps the structure passages are cut by (:mod:`index.passages`): paragraphs apart
by a blank line, headings as Markdown ``#`` lines. A file that cannot be read becomes a
record with the reason (the job reports it by name and goes on).
"""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any

DOCUMENT_SUFFIXES = {".txt": "text", ".text": "text", ".md": "markdown",
                     ".markdown": "markdown", ".html": "html", ".htm": "html", ".pdf": "pdf"}
_BLOCKS = {"p", "div", "section", "article", "main", "header", "footer", "aside", "nav",
           "li", "ul", "ol", "dl", "dt", "dd", "table", "tr", "blockquote", "pre", "figure",
           "figcaption", "br", "hr", "form", "address", "details", "summary"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_SKIP = {"script", "style", "noscript", "template", "svg", "head"}
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n\s*\n\s*")


class _Text(HTMLParser):
    """An HTML page's text: a blank line between blocks, headings as ``#`` lines, the
    ``<title>`` as the first heading when the page has no ``<h1>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.title: list[str] = []
        self.skip = 0
        self.in_title = False
        self.has_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skip += 1
        elif tag == "title":
            self.in_title = True
        elif tag in _HEADINGS:
            self.has_h1 |= tag == "h1"
            self.out.append("\n\n" + "#" * _HEADINGS[tag] + " ")
        elif tag in _BLOCKS:
            self.out.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag == "title":
            self.in_title = False
        elif tag in _HEADINGS or tag in _BLOCKS:
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skip:
            self.out.append(_SPACES.sub(" ", data.replace("\n", " ")))

    def text(self) -> str:
        body = "".join(self.out)
        title = " ".join("".join(self.title).split())
        if title and not self.has_h1:
            body = f"# {title}\n\n{body}"
        paragraphs = (" ".join(p.split()) for p in _BLANKS.split(body))
        return "\n\n".join(p for p in paragraphs if p)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.text()


def pdf_text(data: bytes) -> str:
    """A PDF's text, a page after another (pypdf); a blank line between pages."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    pages = [(page.extract_text() or "").strip() for page in reader.pages]
    return "\n\n".join(p for p in pages if p)


def document_text(path: Path) -> str:
    """The text of a document file by its suffix; ``ValueError`` saying why it has none."""
    fmt(path.name)
    return text_of(path.name, path.read_bytes())[1]


def fmt(name: str) -> str:
    """A document file's format by the suffix of its ``name``; ``ValueError`` for another."""
    kind = DOCUMENT_SUFFIXES.get(PurePosixPath(name).suffix.lower())
    if kind is None:
        raise ValueError(f"{name!r} is not a document file (known suffixes: "
                         f"{', '.join(sorted(DOCUMENT_SUFFIXES))})")
    return kind


def text_of(name: str, data: bytes) -> tuple[str, str]:
    """(format, text) of a document file called ``name`` holding ``data``; ``ValueError``
    saying why it has no text."""
    kind = fmt(name)
    try:
        if kind == "pdf":
            text = pdf_text(data)
        else:
            raw = data.decode("utf-8", errors="strict")
            text = html_text(raw) if kind == "html" else raw
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    except Exception as e:  # pypdf raises its own errors for a damaged or encrypted file
        if isinstance(e, OSError | ValueError):
            raise ValueError(str(e) or type(e).__name__) from e
        raise ValueError(f"{type(e).__name__}: {e}") from e
    if not text.strip():
        raise ValueError("no text in it (a scanned PDF needs OCR first)" if kind == "pdf"
                         else "the file is empty")
    return kind, text


def document_row(path: Path, root: Path | None) -> dict[str, Any]:
    """The row a document file stands for: ``id`` (its path under ``root``, else its name),
    ``text``, and its ``source`` and ``format`` as metadata."""
    rel = path.relative_to(root).as_posix() if root is not None else path.name
    return {"id": rel, "text": document_text(path), "source": rel,
            "format": DOCUMENT_SUFFIXES[path.suffix.lower()]}


def expand(inputs: list[Path], known: set[str]) -> list[tuple[Path, Path | None]]:
    """Each input file as (file, None), and every file under each input folder whose suffix
    is in ``known`` as (file, folder), sorted."""
    out: list[tuple[Path, Path | None]] = []
    for p in inputs:
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file()
                           and f.suffix.lower() in known and not f.name.startswith("."))
            if not files:
                raise ValueError(f"folder {p} holds no file to index (known suffixes: "
                                 f"{', '.join(sorted(known))})")
            out += [(f, p) for f in files]
        else:
            out.append((p, None))
    return out
