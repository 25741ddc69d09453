"""Multi-tenancy: one collection holds the documents of many tenants, and every read and
write names one, so that no tenant ever sees, overwrites or deletes another's documents.

A collection is made multi-tenant at creation. On Milvus Lite and Milvus >= 2.4 its
``tenant`` field is the partition key (Milvus hashes tenants to partitions and prunes the
others from a search; Milvus 2.3.5 lost upserted rows under that filter, so there it is a
plain field);
the FAISS store keeps the tenant on each item. Ids are the tenant's own: two tenants may
both have a document ``a``. The stores keep them apart by storing the id as
``tenant:id`` (:func:`stored_id`; a tenant has no ``:``), and every search, count, get and
delete is restricted to the tenant (``tenant == "t"``, and-ed before the caller's filter).
BM25's document statistics are the collection's, across tenants (only scores, never
documents, cross the line).
"""

from __future__ import annotations

import re

from index.store import CollectionInfo

TENANT_FIELD = "tenant"
MAX_TENANT_CHARS = 64
_TENANT = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def check_tenant(info: CollectionInfo, tenant: str | None) -> None:
    """A tenant where the collection needs one, none where it has none, and a well-formed
    one (``ValueError`` with the reason otherwise)."""
    if info.multi_tenant and tenant is None:
        raise ValueError(f"collection {info.name!r} is multi-tenant: every read and write "
                         "names a tenant (the X-Tenant header, or `tenant` in the body)")
    if not info.multi_tenant and tenant is not None:
        raise ValueError(f"collection {info.name!r} is not multi-tenant: send no tenant, "
                         "or create the collection with multi_tenant")
    if tenant is not None and not _TENANT.fullmatch(tenant):
        raise ValueError(f"a tenant is 1..{MAX_TENANT_CHARS} ASCII letters, digits, '_', "
                         f"'.', '@' or '-'; got {tenant[:80]!r}")


def stored_id(tenant: str | None, id_: str) -> str:
    """The primary key an id is stored under: ``tenant:id`` in a multi-tenant collection."""
    return id_ if tenant is None else f"{tenant}:{id_}"


def local_id(stored: str, multi_tenant: bool) -> str:
    """The caller's id of a stored primary key."""
    return stored.split(":", 1)[1] if multi_tenant else stored


def tenant_expr(tenant: str | None, expr: str) -> str:
    """A Milvus filter ``expr`` restricted to ``tenant`` (none: ``expr`` as it is)."""
    if tenant is None:
        return expr
    only = f'{TENANT_FIELD} == "{tenant}"'  # check_tenant: no quote or backslash in it
    return f"({only}) and ({expr})" if expr else only
