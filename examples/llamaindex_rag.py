"""A LlamaIndex query engine over a contract-stamped Chroma store, and a contract it refuses.

What this shows:

1. ``ContractChromaVectorStore`` (a LlamaIndex vector store on a Chroma collection that carries
   the contract's stamp) is filled from the demo corpus (``ctxemb_core/demo/corpus.jsonl``, 24
   short documents, ids = their ``_id``) by ``VectorStoreIndex`` (one node per document) with
   ``ContractEmbedding`` of the bundled all-MiniLM-L6-v2 contract.
2. ``load_index`` opens the store again with the embedding model its stamp names, and a query
   engine answers the demo queries. The LLM is LlamaIndex's ``MockLLM`` (no model hub here);
   each answer's source nodes show what reached the prompt.
3. The same store opened through ``VectorStoreIndex.from_vector_store`` with the embedding
   model of another contract (the same model with a ``"query: "`` prefix; LlamaIndex itself
   checks nothing) is refused with ``ContractMismatchError`` naming the field, before the index
   is returned.

Run (from the repository root)::

    .venv/bin/python examples/llamaindex_rag.py                # a temporary folder
    .venv/bin/python examples/llamaindex_rag.py --path ./db    # a folder that stays
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub from an example

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode

from ctxemb_core import contract_for
from ctxemb_core import demo as demo_data
from ctxemb_core.errors import ContractMismatchError
from ctxemb_llamaindex import ContractChromaVectorStore, ContractEmbedding, load_index

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COLLECTION = "examples"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def build_store(embed: ContractEmbedding, path: Path) -> ContractChromaVectorStore:
    """The stamped store, holding the example corpus: one node per document, its id the
    document's (the store upserts by node id, so re-running adds nothing twice; a node parser
    would make new ids each run). The title is metadata LlamaIndex shows the LLM but leaves out
    of what is embedded."""
    rows = read_jsonl(demo_data.corpus_path())
    store = ContractChromaVectorStore(COLLECTION, embed, persist_path=str(path))
    nodes = [
        TextNode(
            text=r["text"],
            id_=r["_id"],
            metadata={"title": r["title"]},
            excluded_embed_metadata_keys=["title"],
        )
        for r in rows
    ]
    context = StorageContext.from_defaults(vector_store=store)
    VectorStoreIndex(nodes, storage_context=context, embed_model=embed)
    return store


def run(path: Path) -> None:
    contract = contract_for(MODEL)
    print(f"contract {contract.describe()}")
    build_store(ContractEmbedding(contract), path)
    # Opened again as a reader would: the contract is read from the collection's stamp.
    index = load_index(ContractChromaVectorStore(COLLECTION, persist_path=str(path)))
    print(f"store: collection {COLLECTION!r} in {path}, {index.vector_store.index.count()} nodes\n")

    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3)
    for query in read_jsonl(demo_data.queries_path()):
        response = engine.query(query["text"])
        ids = [n.node.node_id for n in response.source_nodes]
        print(f"{query['_id']}: {query['text']}")
        print(f"  retrieved: {', '.join(str(i) for i in ids)}")

    other = ContractEmbedding(contract.with_(query_prefix="query: "))
    print(f"\nthe same store under another contract ({other.contract.describe()}):")
    try:
        wrong = VectorStoreIndex.from_vector_store(index.vector_store, embed_model=other)
        wrong.as_query_engine(llm=MockLLM()).query("how do I keep slugs off lettuce")
    except ContractMismatchError as err:
        print(f"  refused: ContractMismatchError, fields {err.fields}")
        print("  " + str(err).replace("\n", "\n  "))
    else:
        raise SystemExit("the query ran under another contract: the guard did not run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, help="Chroma's folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.path is not None:
        run(args.path)
    else:
        with tempfile.TemporaryDirectory(prefix="ctxemb-llamaindex-") as tmp:
            run(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
