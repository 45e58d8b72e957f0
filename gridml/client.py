"""The metrics API's HTTP client (:class:`gridml.store.client.ApiClient`), under its public name."""

from gridml.store.client import ApiClient

__all__ = ["ApiClient"]
