"""Where a collection's alignir record lives: its properties, or a metadata collection.

An export ties a collection to its index by a few ``alignir.*`` entries (retrieval/milvus.py:
the manifest, the owning folder, the completion mark). A Milvus that keeps collection
properties (a server, Milvus Lite 3.x) holds them there. The Milvus 2.5 engine keeps none: it
accepts properties at creation and forgets them, and refuses to alter them. There the record
goes in the metadata collection :data:`META` of the same database, one row per collection
(primary key: the collection's name) holding the record as JSON and the collection's token.

The token is a random hex string that :func:`describe` puts in the description of every
collection an export creates (Milvus Lite 3.x drops descriptions, but keeps properties). A row
whose token is not the one in the live collection's description (the collection was dropped and
another made under its name) is stale and ignored: a record is read back only for the very
collection it was written for.
The record is written after the collection is created: a collection with a token and no record
is an export stopped in between (it holds no rows alignir inserted; :attr:`Record.unrecorded`).
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from alignir.errors import MilvusError

__all__ = ["META", "Record", "create", "describe", "forget", "read", "update"]

#: the metadata collection (one per database)
META = "alignir_meta"
PREFIX = "alignir."
RECORD_MAX_LENGTH = 65535
_TOKEN = re.compile(r"\[alignir-token ([0-9a-f]{32})\]")


def describe(base: str) -> str:
    """A new collection's description: ``base`` and a fresh token."""
    return f"{base} [alignir-token {secrets.token_hex(16)}]"


@dataclass
class Record:
    """A collection's ``alignir.*`` entries and where they are kept."""

    values: dict[str, str] = field(default_factory=dict)
    #: the token in the collection's description (None: not created by an export that sets one)
    token: str | None = None
    #: "properties", "meta", or "" (no record)
    where: str = ""

    @property
    def unrecorded(self) -> bool:
        """Created by an export (a token) that stopped before writing the record."""
        return self.token is not None and not self.where


def _ours(values: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in values.items() if k.startswith(PREFIX)}


def read(client: Any, name: str) -> Record:
    """The record of the existing collection ``name``: its properties when they hold one, else
    its row of :data:`META` with the collection's token (read at Strong consistency)."""
    desc = client.describe_collection(name)
    props = _ours(desc.get("properties") or {})
    match = _TOKEN.search(desc.get("description") or "")
    token = match.group(1) if match else None
    if props:
        return Record(props, token, "properties")
    if token is None or not client.has_collection(META):
        return Record({}, token, "")
    client.load_collection(META)
    rows = client.query(META, filter=f"name == {json.dumps(name)}", output_fields=["token", "record"],
                        consistency_level="Strong")
    for row in rows:
        if row["token"] == token:
            return Record(_ours(json.loads(row["record"])), token, "meta")
    return Record({}, token, "")


def create(client: Any, name: str, schema: Any, index_params: Any, values: Mapping[str, str], **kw: Any) -> Record:
    """Create the collection with ``values`` as its properties; where the server does not keep
    them, write them to :data:`META` instead. ``schema``'s description must come from :func:`describe`."""
    client.create_collection(name, schema=schema, index_params=index_params, properties=dict(values), **kw)
    rec = read(client, name)
    if rec.where == "properties" and rec.values == dict(values):
        return rec  # kept (Milvus Lite 3.x keeps properties, though not the description)
    if rec.token is None:
        raise MilvusError(f"collection {name} kept neither its properties nor its description: "
                          f"alignir cannot record its export there")
    return _put(client, name, rec.token, dict(values))


def update(client: Any, name: str, rec: Record, values: Mapping[str, str] | None = None,
           drop: Sequence[str] = ()) -> Record:
    """Set ``values`` and remove the keys ``drop`` of the record ``rec`` (as :func:`read` gave it)."""
    if rec.where == "properties":
        if drop:
            client.drop_collection_properties(name, list(drop))
        if values:
            client.alter_collection_properties(name, dict(values))
        new = {k: v for k, v in rec.values.items() if k not in drop}
        return Record({**new, **(values or {})}, rec.token, "properties")
    if rec.token is None:
        raise MilvusError(f"collection {name} has no alignir token: its record cannot be written")
    new = {k: v for k, v in rec.values.items() if k not in drop}
    return _put(client, name, rec.token, {**new, **(values or {})})


def forget(client: Any, name: str) -> None:
    """Delete the :data:`META` row of ``name`` (after the collection is dropped)."""
    if client.has_collection(META):
        client.delete(META, filter=f"name == {json.dumps(name)}")


def _put(client: Any, name: str, token: str, values: dict[str, str]) -> Record:
    """Write the whole record of ``name`` in one upsert (it replaces the row as one operation)."""
    raw = json.dumps(values, sort_keys=True)
    if len(raw.encode("utf-8")) > RECORD_MAX_LENGTH:
        raise MilvusError(f"the alignir record of collection {name} is {len(raw.encode('utf-8'))} bytes, over "
                          f"the {RECORD_MAX_LENGTH} a metadata row holds")
    _ensure(client)
    client.upsert(META, [{"name": name, "token": token, "record": raw, "v": [0.0, 0.0]}])
    return Record(dict(values), token, "meta")


def _ensure(client: Any) -> None:
    """Create and load :data:`META` when missing (it needs a vector field: a constant placeholder)."""
    if client.has_collection(META):
        client.load_collection(META)
        return
    from pymilvus import DataType

    s = client.create_schema(auto_id=False, enable_dynamic_field=False,
                             description="alignir: the record of each exported collection (manifest, owner, "
                                         "completion mark) where collection properties are not kept")
    s.add_field("name", DataType.VARCHAR, is_primary=True, max_length=255)
    s.add_field("token", DataType.VARCHAR, max_length=64)
    s.add_field("record", DataType.VARCHAR, max_length=RECORD_MAX_LENGTH)
    s.add_field("v", DataType.FLOAT_VECTOR, dim=2)
    ip = client.prepare_index_params()
    ip.add_index("v", index_type="FLAT", metric_type="L2")
    client.create_collection(META, schema=s, index_params=ip)
    client.load_collection(META)
