"""MkDocs hooks: the README is the site's home page, and links written for GitHub work on the site.

The same Markdown is read in two places: on GitHub (README.md at the top, pages under docs/) and
as the MkDocs site (docs/ is the site's root). Links are written for GitHub; these hooks map them:

- README.md becomes the site's ``index.md``; its links ``docs/x.md`` become ``x.md``.
- A page's link ``../README.md`` is the home page, ``index.md``.
- Images kept beside the code (``../benchmarks/results/*.png``, written by the benchmarks) are
  copied into the site under ``assets/``.

Anything else that does not resolve stays a warning, which ``mkdocs build --strict`` fails on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Images outside docs/ that pages show, relative to the repository root.
_IMAGES = re.compile(r"\]\(\.\./(benchmarks/results/[\w.-]+\.png)\)")


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    files.append(File.generated(config, "index.md", abs_src_path=str(README)))
    for page in Path(config["docs_dir"]).glob("*.md"):
        for image in _IMAGES.findall(page.read_text(encoding="utf-8")):
            uri = "assets/" + Path(image).name
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(ROOT / image)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files, **kwargs: Any) -> str:
    if page.file.src_uri == "index.md":
        return re.sub(r"\]\(docs/", "](", markdown)
    markdown = markdown.replace("](../README.md", "](index.md")
    return _IMAGES.sub(lambda m: "](assets/" + Path(m.group(1)).name + ")", markdown)
