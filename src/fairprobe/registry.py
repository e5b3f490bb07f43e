"""One generic typed registry (families, probe sets, suites, model schemes): lazy entries, collision errors.

An entry is either an object or a lazy reference `"package.module:attribute"` imported on first use, so
registering a family costs no import. Registering a name twice is a ConfigError naming both owners; asking for
an unknown name is a ConfigError listing the known ones. A registry may name an entry-point group: third-party
packages add entries there (`[project.entry-points."fairprobe.families"] name = "pkg.module:FAMILY"`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar, overload

from fairprobe.errors import ConfigError

T = TypeVar("T")


def import_object(reference: str) -> object:
    """The object a `module:attribute` reference names (dots in the attribute walk into it)."""
    module_name, _, attribute = reference.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Named entries of one kind, each an object or a lazy `module:attribute` reference."""

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._entry_points_read = entry_point_group is None

    def _check_free(self, name: str, owner: str) -> None:
        taken = self._lazy.get(name) or (repr(self._entries[name]) if name in self._entries else None)
        if taken is not None:
            raise ConfigError(f"{self.kind} {name!r} is registered twice: by {taken} and by {owner}")

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, obj: T) -> T: ...
    def register(self, name: str, obj: T | None = None) -> T | Callable[[T], T]:
        """Add an entry (or use as a decorator: `@REGISTRY.register("name")`); a taken name is a ConfigError."""
        if obj is None:
            return lambda value: self.register(name, value)
        self._check_free(name, repr(obj))
        self._entries[name] = obj
        return obj

    def register_lazy(self, name: str, reference: str) -> None:
        """Add an entry imported on first use from `module:attribute`."""
        self._check_free(name, reference)
        self._lazy[name] = reference

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        for ep in entry_points(group=self.entry_point_group or ""):
            if ep.name not in self._entries and ep.name not in self._lazy:
                self.register_lazy(ep.name, ep.value)

    def _resolve(self, name: str) -> T:
        reference = self._lazy.pop(name)
        try:
            self._entries[name] = import_object(reference)  # type: ignore[assignment]
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{self.kind} {name!r} cannot be loaded from {reference}: {exc}") from None
        return self._entries[name]

    def get(self, name: str) -> T:
        """The entry of a name; an unknown name is a ConfigError listing the known ones."""
        self._read_entry_points()
        if name in self._entries:
            return self._entries[name]
        if name in self._lazy:
            return self._resolve(name)
        raise ConfigError(f"unknown {self.kind} {name!r}: choose from {', '.join(self.names())}")

    def names(self) -> list[str]:
        """Every registered name, in registration order."""
        self._read_entry_points()
        return [*self._entries, *(n for n in self._lazy if n not in self._entries)]

    def items(self) -> list[tuple[str, T]]:
        """Every entry (lazy ones imported), in registration order."""
        return [(name, self.get(name)) for name in self.names()]

    def unregister(self, name: str) -> None:
        """Remove an entry (tests and plugins that replace one)."""
        self._entries.pop(name, None)
        self._lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:
        self._read_entry_points()
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
