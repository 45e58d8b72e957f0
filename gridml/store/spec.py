"""A study's spec, typed: ``spec_of(study)`` reads the JSON stored with it (``Study.spec``) as a
:class:`gridml.specmodel.StoredSpec`, the one place where it is turned from a mapping into fields.

Every reader in the store and the searchers goes through it, so no default is restated: a field
an older store (or a study created over the API) lacks holds the default the spec model states.
"""

from __future__ import annotations

from gridml.specmodel import Search, StoredSpec, stored_search, stored_spec
from gridml.store.records import Study

__all__ = ["Search", "StoredSpec", "search_of", "spec_of", "stored_search"]


def spec_of(study: Study) -> StoredSpec:
    """The study's spec as typed fields (never raises: see :func:`gridml.specmodel.stored_spec`)."""
    return stored_spec(study.spec)


def search_of(study: Study) -> Search:
    """The study's ``search`` section, typed."""
    return spec_of(study).search
