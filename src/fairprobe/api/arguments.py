"""The Python API's argument checks: an unknown or misspelled argument is one clear error naming the close match,
and a bad value is fairprobe's own one-line error, never a raw pydantic or library traceback."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from fairprobe.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


class ArgumentError(ConfigError, TypeError):
    """A call of the Python API with an argument the function does not take (also a TypeError, as Python's own)."""


def unknown_argument(function: str, name: str, known: list[str]) -> ArgumentError:
    """The error for one argument `function` does not take, with the closest known name."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f": did you mean {close[0]!r}?" if close else f" (it takes {', '.join(known)})"
    return ArgumentError(f"fairprobe.{function}() has no argument {name!r}{hint}")


def one_line(exc: ValidationError, function: str) -> ConfigError:
    """A pydantic validation failure as fairprobe's one-line error naming the argument and what is wrong."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "__root__") or "arguments"
    given = first.get("input")
    shown = "" if isinstance(given, dict) else f", got {given!r}"
    return ConfigError(f"fairprobe.{function}(): {where}: {first.get('msg', 'invalid value')}{shown}")


def public(function: F) -> F:
    """Check a public API function's keyword arguments by name before it runs; turn validation failures of its
    values into one-line ConfigErrors. The signature (and so help() and the reference) stays the function's own."""
    parameters = inspect.signature(function).parameters
    known = [n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    positional = [n for n, p in parameters.items() if p.kind == p.POSITIONAL_OR_KEYWORD]

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in known:
                raise unknown_argument(function.__name__, name, known)
        if len(args) > len(positional):
            raise ArgumentError(
                f"fairprobe.{function.__name__}() takes {len(positional)} positional argument"
                f"{'s' if len(positional) != 1 else ''} ({', '.join(positional)}); name the others"
            )
        try:
            return function(*args, **kwargs)
        except ValidationError as exc:
            raise one_line(exc, function.__name__) from None

    return checked  # type: ignore[return-value]


def names(value: str | list[str] | tuple[str, ...] | None, what: str) -> list[str] | None:
    """A list of names from a list, or from one string ("template" or "template,stsb"); None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value if v.strip()]
    else:
        raise ConfigError(f"{what} must be a name, a comma-separated string or a list of names, got {value!r}")
    if not items:
        raise ConfigError(f"{what} names nothing: {value!r}")
    return items


def mapping(value: Any, what: str) -> dict[str, Any]:
    """A dict argument (`options`, `model_args`) as given; None is empty; anything else (a str, a list) is an
    ArgumentError naming the argument."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ArgumentError(f"{what} must be a dict of key: value (e.g. {{'flip': 'vijil'}}), got {value!r}")
    return value


def path_or_none(value: str | Path | None, what: str) -> Path | None:
    """A path from a str or Path; None stays None; anything else is a ConfigError naming the argument."""
    if value is None or isinstance(value, Path):
        return value
    if isinstance(value, str) and value:
        return Path(value)
    raise ConfigError(f"{what} must be a path (str or pathlib.Path), got {value!r}")
