"""A query's documents, or one document, as plain dicts, without the library's snapshots.

`query.stream()` wraps each document in a DocumentSnapshot, which deep-copies its data when it is made and again in
`to_dict()`: for the dispatcher's measurements query (documents of a few hundred values) that was most of the call's
CPU beside the RPC itself. Here the query's own request (the library's `_prep_stream`: parent, structured query,
retry settings) goes through the library's Firestore API client, and each document's fields are decoded by the
library's own `_helpers.decode_dict`, so the values are exactly what `to_dict()` returns, once.

Like functions/gcp/firestore_writes.py, it reads what the library keeps private (`_prep_stream`, the client's
`_firestore_api` and `_rpc_metadata`): the library is pinned, and tests/integration/test_firestore_reads.py runs
the real query against the emulator beside the library's own stream.

What it leaves out: the library's resume of a stream broken part-way (it restarts after the last document it
had); here such a break raises, and the caller's error handling decides (the dispatcher plans from its model).
"""

from __future__ import annotations

from typing import Any


def query_documents(query: Any) -> list[dict[str, Any]]:
    """The documents `query` (a library Query) matches, in its order, each as `snapshot.to_dict()` would give it."""
    from google.api_core import gapic_v1
    from google.cloud.firestore_v1 import _helpers

    client = query._client
    request, _prefix, kwargs = query._prep_stream(retry=gapic_v1.method.DEFAULT)
    responses = client._firestore_api.run_query(request=request, metadata=client._rpc_metadata, **kwargs)
    found: list[dict[str, Any]] = []
    for response in responses:
        pb = response._pb
        if pb.HasField("document"):
            doc = _helpers.decode_dict(pb.document.fields, client)
            if not isinstance(doc, dict):  # a document's fields decode to a map (a Vector is a field's value)
                raise TypeError(f"Firestore answered {pb.document.name} as {type(doc).__name__}, not a map of fields")
            found.append(doc)
    return found


def get_document(client: Any, ref: Any) -> tuple[dict[str, Any] | None, Any]:
    """The document `ref` names as `snapshot.to_dict()` would give it, and its update time (a protobuf Timestamp, as
    a write's precondition takes it); (None, None) when there is none. One GetDocument call, where the library's
    `get()` streams a BatchGetDocuments and builds a snapshot with two deep copies."""
    from google.api_core import exceptions as gexc
    from google.cloud.firestore_v1 import _helpers

    try:
        found = client._firestore_api.get_document(request={"name": ref._document_path}, metadata=client._rpc_metadata)
    except gexc.NotFound:
        return None, None
    pb = found._pb
    doc = _helpers.decode_dict(pb.fields, client)
    if not isinstance(doc, dict):
        raise TypeError(f"Firestore answered {pb.name} as {type(doc).__name__}, not a map of fields")
    return doc, pb.update_time
