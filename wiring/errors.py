"""The wiring's own failures, in words of the domain: what was asked for does not exist, is
in the way of something else, is too large, or is not a valid request. The wiring raises
them; HTTP maps each to its status in one table (:func:`api.errors.from_exception`: 404,
409, 413, 422), and the command line prints them."""

from __future__ import annotations


class DomainError(Exception):
    """One of the wiring's failures; its message says what happened, in the user's words."""


class NotFoundError(DomainError, LookupError):
    """Something named does not exist (a model, a job, a document): 404."""


class ConflictError(DomainError):
    """The request fits, but the state is in its way (no decoder, a job running): 409."""


class TooLargeError(DomainError):
    """More than a limit allows in one request (documents, ids, searches): 413."""


class InvalidError(DomainError, ValueError):
    """A request that cannot be done as asked: 422, naming ``param`` where one field is at
    fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
