"""pydantic types the tool and output tests share, in a module of their own so
that the tests which check pydantic is never imported can import theirs alone."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator


class Model(BaseModel):
    x: int


@dataclasses.dataclass
class Holds:
    """A standard dataclass holding a pydantic model: pydantic's to validate."""

    model: Model
    label: str = "box"


class Item(BaseModel):
    name: str
    qty: int = Field(gt=0, description="How many.")


class Order(BaseModel):
    items: list[Item]
    note: str | None = None


class Sealed(BaseModel):
    """What OpenAI's strict mode takes: every property required, no others."""

    model_config = ConfigDict(extra="forbid")
    name: str
    age: int


class Checked(BaseModel):
    """A model whose own validator refuses a value, and counts its runs (``seen``)."""

    seen: ClassVar[int] = 0
    word: str

    @field_validator("word")
    @classmethod
    def _lowercase(cls, value: str) -> str:
        Checked.seen += 1
        if value != value.lower():
            raise ValueError("must be lowercase")
        return value


@pydantic.dataclasses.dataclass
class Point:
    x: int
    y: int = 0
