"""Helpers for testing agents offline: a scripted model and its responses."""

from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptedResponse as ScriptedResponse
from ._scripted import ScriptExhaustedError as ScriptExhaustedError
from ._scripted import scripted_response as scripted_response

__all__ = ["ScriptExhaustedError", "ScriptedModel", "ScriptedResponse", "scripted_response"]
