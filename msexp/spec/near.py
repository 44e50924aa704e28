"""The keys a sweep file allows at a key path, and the one nearest a misspelt key."""

from __future__ import annotations

import difflib
from typing import Any, get_args

from pydantic import BaseModel


def did_you_mean(name: str, allowed: Any) -> str:
    """"; did you mean micro_size?" where a key in `allowed` is close to `name`."""
    near = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.75)  # not depth: width
    return f"; did you mean {near[0]}?" if near else ""


def allowed_keys(model: type[BaseModel], written: list[str], forms: tuple[str, ...] = ()
                 ) -> list[str]:
    """The keys `model` allows at the key path `written`, as a file writes them (a knob's
    name, not its field's); `forms`: the tags in a path (`[values]`), skipped."""
    models = [model]
    for part in written:
        if part.isdigit() or part in forms:
            continue
        models = [inner for outer in models for name, field in outer.model_fields.items()
                  if part in (name, field.alias) for inner in _models_in(field.annotation)]
    return list(dict.fromkeys(field.alias or name for outer in models
                              for name, field in outer.model_fields.items()))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's type holds (through Optional, Union, list, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]
