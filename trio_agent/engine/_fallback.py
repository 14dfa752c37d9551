"""``FallbackModel``: models tried in order, an attempt on each, moving on when
one fails with a provider's error; and ``model_label``, how the ledger names a
model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, final

import trio

from ..errors import leaves
from ..model import Model, ModelError, ModelRequest, ModelStream
from ._options import check_model, model_of

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

__all__ = ["FallbackModel", "model_label"]

FallbackOn = Callable[[Exception], bool] | tuple[type[Exception], ...]


@final
class FallbackModel:
    """A model that answers with the first of ``models`` that can.

    ``FallbackModel(first, *rest)``: each a ``Model`` or a model name
    (``"openai:gpt-4o"``, made by ``providers.infer_model``). In a run or a
    turn each attempt is one model's: an attempt that fails with a provider's
    error (``fallback_on``: by default any ``ModelError``, that is a transient
    failure (429, 5xx, a dropped or refused connection, a timeout), refused
    credentials, a refused request, a context overflow, or a stream that broke
    the provider's own format) moves to the next model at once, in the same
    step, with no wait. An attempt that fails otherwise (an exception that is
    not a provider's), or the last model's, ends the round: the session's retry
    policy then decides as for any model, counting rounds
    (``RetryPolicy(attempts=3)`` tries the chain three times), and a retry
    starts again from the first model. The bare loop (``run_agent_loop``) has
    no retries: one round. An answer that breaks the loop's rules fails the
    turn (``MODEL_PROTOCOL_ERROR``) whichever model gave it. Cancellation tries
    no other model.

    Each attempt is recorded with its model: the ledger's ``attempt/failed``
    and the ``attempt.failed`` event name the model that failed
    (``model_label``), the assistant message's record the one that answered,
    and each attempt's ``chat`` span its own model. ``fallback_on`` is a tuple of
    exception types, or a function of the error returning whether to move on
    (an ``ExceptionGroup`` moves on when all its exceptions do).

    ``stream(request)`` used directly (outside a run) moves on only while
    opening a stream: the first model whose stream opens answers.

    The models it made from names are its own: ``await fallback.aclose()`` (or
    ``async with fallback:``) closes their connections; models given as objects
    belong to whoever made them.
    """

    __slots__ = ("_fallback_on", "_owned", "models")

    def __init__(
        self, first: Model | str, *rest: Model | str, fallback_on: FallbackOn = (ModelError,)
    ) -> None:
        models: list[Model] = []
        owned: list[Model] = []
        for given in (first, *rest):
            model = model_of(given)
            if model is not given:
                owned.append(model)
            if isinstance(model, FallbackModel):
                raise TypeError(
                    "a FallbackModel's models are models, not FallbackModels: list them all in one"
                )
            check_model(
                model,
                "a FallbackModel's models must each have a callable stream(request) or be "
                "a model name",
            )
            models.append(model)
        kinds = fallback_on if isinstance(fallback_on, tuple) else None
        if (kinds is None and not callable(fallback_on)) or not all(
            isinstance(kind, type) and issubclass(kind, Exception) for kind in kinds or ()
        ):
            raise TypeError(
                "fallback_on must be a tuple of exception types or a function of the error, "
                f"got {fallback_on!r:.100}"
            )
        self.models: tuple[Model, ...] = tuple(models)
        self._fallback_on = fallback_on
        self._owned = tuple(owned)

    async def __aenter__(self) -> FallbackModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the models made from names (their connection pools), each even if
        another's close fails."""
        async with AsyncExitStack() as stack:
            for model in self._owned:
                close = getattr(model, "aclose", None)
                if close is not None:
                    stack.push_async_callback(close)

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(map(repr, self.models))})"

    def moves_on(self, error: Exception) -> bool:
        """Whether an attempt that failed with ``error`` moves to the next model."""
        rule = self._fallback_on
        found = leaves(error)
        if isinstance(rule, tuple):
            return all(isinstance(leaf, rule) for leaf in found)
        return all(isinstance(leaf, Exception) and rule(leaf) is True for leaf in found)

    def next_after(self, position: int, error: Exception) -> int | None:
        """The position of the model to try next when an attempt on the model at
        ``position`` failed with ``error``: the next one if the error moves on,
        else None (the round is over)."""
        if position + 1 < len(self.models) and self.moves_on(error):
            return position + 1
        return None

    def stream(self, request: ModelRequest) -> AbstractAsyncContextManager[ModelStream]:
        return self._first_that_opens(request)

    @asynccontextmanager
    async def _first_that_opens(self, request: ModelRequest) -> AsyncIterator[ModelStream]:
        errors: list[Exception] = []
        for model in self.models:
            async with AsyncExitStack() as stack:
                try:
                    stream = await stack.enter_async_context(model.stream(request))
                except Exception as exc:
                    # a model that turned our cancellation into its own error: no next one
                    await trio.lowlevel.checkpoint_if_cancelled()
                    if not self.moves_on(exc):
                        raise
                    errors.append(exc)
                    continue
                yield stream
                return
        raise ExceptionGroup("every model of the FallbackModel failed", errors)


def model_label(model: object) -> str:
    """How the ledger names a model: ``"provider:model"`` when the model has str
    attributes ``provider`` and ``model`` (the provider adapters do), a
    ``FallbackModel`` as ``fallback(...)`` of its models' labels, else its
    class's qualified name."""
    if type(model) is FallbackModel:
        return f"fallback({', '.join(model_label(m) for m in model.models)})"
    provider = getattr(model, "provider", None)
    name = getattr(model, "model", None)
    if type(provider) is str and type(name) is str:
        return f"{provider}:{name}"
    return type(model).__qualname__
