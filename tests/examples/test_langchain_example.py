"""examples/langchain_rag.py runs as documented: its chain answers from the right documents and
the store is refused under another contract."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langchain_rag.py"

#: The top document of each example query (ctxemb_core/demo/queries.jsonl).
TOP = {"q1": "garden-3", "q2": "space-1", "q3": "money-1", "q4": "code-3", "q5": "tea-2"}


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("langchain_rag_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_example_answers_from_the_retrieved_documents_and_shows_a_refusal(
    example, tmp_path, capsys
):
    # Twice on one folder: the second run opens the stamped store and adds nothing twice.
    for _ in range(2):
        assert example.main(["--path", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "collection 'examples'" in out and "24 documents" in out
        retrieved = dict(re.findall(r"^(q\d): .*\n  retrieved: ([\w-]+), ", out, re.M))
        assert retrieved == TOP
        answers = re.findall(r"^  answer:    From \[([\w-]+)\]", out, re.M)
        assert answers == list(TOP.values())  # the prompt got the retrieved context
        assert "refused: ContractMismatchError, fields ('query_prefix',)" in out
        assert "query_prefix: index='', caller='query: '" in out
