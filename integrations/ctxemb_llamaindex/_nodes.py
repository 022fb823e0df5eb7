"""LlamaIndex's nodes and filters in the guarded index's terms: a node as the record stored (the
text it was embedded from, its metadata, LlamaIndex's own node JSON) and back, and
``MetadataFilters`` as the stores' equality filter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from ctxemb_core.documents import FINGERPRINT_KEY, TEXT_KEY
from ctxemb_core.errors import DataFormatError, InvalidInputError

#: The keys LlamaIndex's own node JSON is kept under (those of its Chroma and other stores).
_NODE_KEYS = ("_node_content", "_node_type")


def node_record(node: Any) -> tuple[str, str, dict[str, Any]]:
    """A node as the record stored: id, the text it is embedded from, metadata with the node."""
    if not isinstance(node, BaseNode):
        raise InvalidInputError(f"nodes must be LlamaIndex nodes, got {type(node).__name__}")
    own = node.get_content(metadata_mode=MetadataMode.NONE)
    if not isinstance(own, str) or not own.strip():
        raise InvalidInputError(
            f"node {node.node_id!r} has no text: a ctxemb index holds texts embedded under "
            "its contract (what a check re-embeds)"
        )
    meta = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
    return node.node_id, node.get_content(metadata_mode=MetadataMode.EMBED), meta


def stored_node(node_id: str, text: str | None, metadata: Mapping[str, Any] | None) -> BaseNode:
    """A stored record as the node written (its node JSON), or, for a record another framework
    or the CLI wrote, a ``TextNode`` of its text and metadata.

    The node JSON carries the node's text a second time, and what the guard checks (a vector
    against its text, the hybrid sides against each other) is the record's stored text: a node
    whose JSON says another text (its metadata rewritten around ctxemb, or a concurrent write
    between two reads) would serve a text nothing checked. It is refused (``DataFormatError``).
    """
    meta = {k: v for k, v in (metadata or {}).items() if k not in (TEXT_KEY, FINGERPRINT_KEY)}
    if all(k in meta for k in _NODE_KEYS):
        node = metadata_dict_to_node(meta)
        if text is not None and node.get_content(metadata_mode=MetadataMode.EMBED) != text:
            raise DataFormatError(
                f"node {node_id!r}: the node JSON its metadata carries ('_node_content') holds "
                "another text than the record stores, the text its vector and the lexical side "
                "are checked against (rewritten around ctxemb, or another write between two "
                "reads); nothing was returned. Write the node again through the store, or "
                "delete it."
            )
        return node
    return TextNode(id_=node_id, text=text or "", metadata=meta)


def where_of(filters: MetadataFilters | None, doc_ids: list[str] | None = None) -> dict | None:
    """LlamaIndex's filters as the stores' filter: metadata equality, all of them."""
    where: dict[str, Any] = {}
    if doc_ids:
        if len(doc_ids) != 1:
            raise InvalidInputError("a ctxemb store filters by one doc_id at a time")
        where["ref_doc_id"] = doc_ids[0]
    if filters is not None:
        if filters.condition not in (None, FilterCondition.AND) and len(filters.filters) > 1:
            raise InvalidInputError(
                f"filter condition {filters.condition!r}: a ctxemb store matches metadata "
                "equality, every filter at once (AND)"
            )
        for one in filters.filters:
            if not isinstance(one, MetadataFilter) or one.operator != FilterOperator.EQ:
                shown = getattr(one, "operator", type(one).__name__)
                raise InvalidInputError(
                    f"filter {shown!r}: a ctxemb store matches metadata equality (operator "
                    "'==') only"
                )
            where[one.key] = one.value
    return where or None
