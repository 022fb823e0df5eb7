"""A LangChain retrieval chain over a contract-stamped Chroma store, and a contract it refuses.

What this shows:

1. ``ContractChroma`` (a ``langchain_chroma.Chroma`` whose collection carries the contract's
   stamp) is built from the demo corpus (``ctxemb_core/demo/corpus.jsonl``, 24 short
   documents, ids = their ``_id``) with
   ``ContractEmbeddings`` of the bundled all-MiniLM-L6-v2 contract.
2. An LCEL chain — retriever → format the documents → ``ChatPromptTemplate`` → model — answers
   the queries of the demo queries. The "model" is a ``RunnableLambda`` standing in for
   an LLM (no model hub here): it answers with the first document of the context it was given, so
   what reaches the prompt is visible.
3. The same store opened under another contract (the same model with a ``"query: "`` prefix) is
   refused with ``ContractMismatchError`` naming the field, before any search runs.

Run (from the repository root)::

    .venv/bin/python examples/langchain_rag.py                # a temporary folder
    .venv/bin/python examples/langchain_rag.py --path ./db    # a folder that stays
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub from an example

from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from ctxemb_core import contract_for
from ctxemb_core import demo as demo_data
from ctxemb_core.errors import ContractMismatchError
from ctxemb_langchain import ContractChroma, ContractEmbeddings

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COLLECTION = "examples"

PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question from this context only.\n\n{context}"),
        ("human", "{question}"),
    ]
)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def format_docs(docs: list[Document]) -> str:
    return "\n".join(f"[{d.id}] {d.metadata['title']}: {d.page_content}" for d in docs)


def stand_in_llm(prompt: PromptValue) -> AIMessage:
    """Stands in for a chat model: answers with the first line of the context it was given."""
    system = prompt.to_messages()[0].content
    context = str(system).split("\n\n", 1)[1]
    return AIMessage(content="From " + context.splitlines()[0])


def build_store(embeddings: ContractEmbeddings, path: Path) -> ContractChroma:
    """The stamped store, holding the example corpus (an upsert: re-running adds nothing twice)."""
    rows = read_jsonl(demo_data.corpus_path())
    store = ContractChroma(COLLECTION, embeddings, persist_directory=str(path))
    store.add_texts(
        [r["text"] for r in rows],
        [{"title": r["title"]} for r in rows],
        ids=[r["_id"] for r in rows],
    )
    return store


def rag_chain(store: ContractChroma, k: int = 3) -> Runnable:
    """retriever → formatted context → prompt → (stand-in) model → text."""
    context = store.as_retriever(k=k) | RunnableLambda(format_docs)
    return (
        {"context": context, "question": RunnablePassthrough()}
        | PROMPT
        | RunnableLambda(stand_in_llm)
        | StrOutputParser()
    )


def run(path: Path) -> None:
    contract = contract_for(MODEL)
    print(f"contract {contract.describe()}")
    store = build_store(ContractEmbeddings(contract), path)
    print(f"store: collection {COLLECTION!r} in {path}, {store.guarded.raw.count()} documents\n")

    chain = rag_chain(store)
    for query in read_jsonl(demo_data.queries_path()):
        ids = [d.id for d in store.as_retriever(k=3).invoke(query["text"])]
        print(f"{query['_id']}: {query['text']}")
        print(f"  retrieved: {', '.join(ids)}")
        print(f"  answer:    {chain.invoke(query['text'])}")

    other = contract.with_(query_prefix="query: ")
    print(f"\nthe same store under another contract ({other.describe()}):")
    try:
        ContractChroma(
            COLLECTION,
            ContractEmbeddings(other),
            persist_directory=str(path),
            create_collection_if_not_exists=False,
        )
    except ContractMismatchError as err:
        print(f"  refused: ContractMismatchError, fields {err.fields}")
        print("  " + str(err).replace("\n", "\n  "))
    else:
        raise SystemExit("the store opened under another contract: the guard did not run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, help="Chroma's folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.path is not None:
        run(args.path)
    else:
        with tempfile.TemporaryDirectory(prefix="ctxemb-langchain-") as tmp:
            run(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
