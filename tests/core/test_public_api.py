"""The public surface is exactly what we mean it to be, and the core imports no framework."""

from __future__ import annotations

import subprocess
import sys

import ctxemb_core
import ctxemb_core.errors as errors


def test_core_exports_exactly_the_intended_names():
    assert ctxemb_core.__all__ == sorted(ctxemb_core.__all__)
    assert set(ctxemb_core.__all__) == {
        "DetectReport",
        "DiffKind",
        "Embedder",
        "EmbeddingContract",
        "IndexStamp",
        "Pooling",
        "Precision",
        "Quantization",
        "Role",
        "__version__",
        "contract_for",
        "detect_contract",
    }


def test_every_error_is_a_ctxemb_error():
    names = set(errors.__all__) - {"CtxembError", "CtxembWarning", "TruncationWarning"}
    for name in names:
        assert issubclass(getattr(errors, name), errors.CtxembError), name
    assert issubclass(errors.ContractMismatchError, errors.StampError)
    assert issubclass(errors.EncoderDriftError, errors.StampError)
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.TruncationWarning, UserWarning)


def test_core_imports_no_framework():
    code = (
        "import sys, ctxemb_core, ctxemb_core.cli, ctxemb_core.eval, ctxemb_core.detect\n"
        "from ctxemb_core import Embedder, contract_for\n"
        "Embedder(contract_for('sentence-transformers/all-MiniLM-L6-v2')).embed_query('x')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "{'chromadb','haystack','langchain','langchain_core','sentence_transformers','ray',"
        "'psycopg','pgvector'}]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_py_typed_is_shipped():
    from pathlib import Path

    assert (Path(ctxemb_core.__file__).parent / "py.typed").is_file()


def test_the_framework_adapters_export_their_components():
    import ctxemb_haystack
    import ctxemb_langchain

    assert set(ctxemb_haystack.__all__) == {
        "ContractAliasDocumentStore",
        "ContractAliasRetriever",
        "ContractCrossEncoderRanker",
        "ContractDocumentEmbedder",
        "ContractDocumentWriter",
        "ContractFusionJoiner",
        "ContractLateInteractionRanker",
        "ContractLexicalRetriever",
        "ContractRetriever",
        "ContractTextEmbedder",
        "DuplicateDocumentsError",
        "eval_path",
    }
    assert set(ctxemb_langchain.__all__) == {
        "ContractAliasVectorStore",
        "ContractChroma",
        "ContractCrossEncoderReranker",
        "ContractEmbeddings",
        "ContractHybridRetriever",
        "ContractLateInteractionReranker",
        "ContractPGVector",
        "ContractQdrant",
        "ContractRetriever",
        "ContractVectorStore",
        "eval_path",
    }
    for module in (ctxemb_haystack, ctxemb_langchain):
        for name in module.__all__:
            assert getattr(module, name).__module__.startswith(module.__name__), name


def test_the_rerank_package_exports_exactly_the_intended_names():
    import ctxemb_core.rerank as rerank

    assert rerank.__all__ == sorted(rerank.__all__)
    assert set(rerank.__all__) == {
        "Activation",
        "Candidate",
        "CrossEncoderReranker",
        "Hit",
        "LateInteractionReranker",
        "LazyReranker",
        "PairFormat",
        "Ranked",
        "RerankKind",
        "Reranker",
        "RerankerContract",
        "Reranking",
        "ScoreThreshold",
        "Shortlist",
        "SkipTokens",
        "TokenVectorStore",
        "TwoStageResult",
        "as_threshold",
        "check_settings",
        "load_reranker_contract",
        "maxsim",
        "rerank_contract_for",
        "reranker_for",
        "reranker_from_config",
        "resolve_threshold",
        "two_stage",
    }
    for name in rerank.__all__:
        assert getattr(rerank, name).__module__.startswith("ctxemb_core.rerank"), name


def test_the_chroma_adapter_exports_exactly_the_intended_names():
    import ctxemb_chroma

    assert set(ctxemb_chroma.__all__) == {
        "ChromaDriver",
        "catalog",
        "ContractEmbeddingFunction",
        "GuardedCollection",
        "IndexSummary",
        "check_metadatas",
        "check_name",
        "connect",
        "detect",
        "driver",
        "eval_path",
        "index_with_ray",
        "lexical_folder",
        "migrate",
        "open_collection",
        "open_hybrid",
        "restamp",
        "search",
        "shortlist",
        "stamped_contract",
        "stored_collection",
        "stored_or_none",
        "verify",
    }


def test_the_export_surface():
    from ctxemb_core import Embedder, export
    from ctxemb_core.contract import DiffKind

    assert export.__all__ == ["export_contract", "export_model", "is_export"]
    assert callable(Embedder.from_export)
    assert {k.value for k in DiffKind} == {"identical", "label", "query_only", "reembed"}


def test_serving_an_export_imports_no_torch_stack():
    # What a torch-free server imports: the export module and the serving backend, and from them
    # no torch, transformers, onnx, safetensors or sentence-transformers.
    code = (
        "import sys, ctxemb_core, ctxemb_core.export, ctxemb_core.backends.exported\n"
        "from ctxemb_core import Embedder, IndexStamp, contract_for\n"
        "heavy = {'torch','transformers','onnx','safetensors','sentence_transformers'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_family_surface():
    """Static models, layer mixing, Instructor pooling and the versioned int8 recipes."""
    import dataclasses

    import ctxemb_core.static as static
    from ctxemb_core.backends.onnx import QUANTIZATION_RECIPES

    assert static.__all__ == [
        "WORD_PATTERN",
        "is_static_folder",
        "static_contract",
        "static_from_model",
        "static_from_vectors",
    ]
    fields = {f.name for f in dataclasses.fields(ctxemb_core.EmbeddingContract)}
    assert {"layers", "include_prompt", "quantization"} <= fields
    values = [q.value for q in ctxemb_core.Quantization]
    assert values == ["int8-dynamic", "int8-dynamic-pc-v1"] == list(QUANTIZATION_RECIPES)


def test_the_store_adapters_import_ray_only_when_a_ray_job_runs():
    import subprocess
    import sys

    code = "import sys, ctxemb_chroma, ctxemb_pgvector, ctxemb_ray; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
