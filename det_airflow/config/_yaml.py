"""YAML text -> plain data, with budgets that hold before anything is expanded or copied.

PyYAML's safe loader is safe from code execution, not from size: an alias (``*name``) shares the
anchored node, so a few hundred bytes can name billions of values ("billion laughs"), and any
later copy walks all of them. The loader here counts aliases and nesting while the document is
composed, then sizes the composed graph (each shared node once) and refuses it before the
data is constructed, so a refused document costs about as much as reading its text.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from det_airflow.config._limits import MAX_CONFIG_BYTES, MAX_YAML_ALIASES, MAX_YAML_DEPTH, MAX_YAML_NODES
from det_airflow.errors import ConfigError

_SECOND_DOCUMENT = "expected a single document in the stream"  # PyYAML's wording
_REREAD_LIMIT = 64 * 1024


class _Refused(Exception):
    """The document is over one of the budgets; the message says which."""


try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml
    _SafeLoader: type = yaml.SafeLoader
else:

    class _LibYAMLSafeLoader(Composer, CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        """SafeLoader's composer and constructor over libyaml's parser: the same events, about ten
        times faster than the pure-Python parser, and the composer stays ours to bound."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _SafeLoader = _LibYAMLSafeLoader


class _Bounds:
    """Mixed into a safe loader: counts aliases and nesting while composing, sizes the result."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)  # type: ignore[call-arg]
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        compose = super().compose_node  # type: ignore[misc]
        if self.check_event(yaml.AliasEvent):  # type: ignore[attr-defined]
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise _Refused(f"it uses more than {MAX_YAML_ALIASES:,} aliases (*name)")
            return compose(parent, index)  # type: ignore[no-any-return]
        if self.check_event(yaml.ScalarEvent):  # type: ignore[attr-defined]
            return compose(parent, index)  # type: ignore[no-any-return]
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _Refused(f"it nests mappings and lists more than {MAX_YAML_DEPTH} levels deep")
        try:
            return compose(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()  # type: ignore[misc]
        if node is not None:
            _Expansion(aliased=self._aliases > 0).measure(node, 0)
        return node  # type: ignore[no-any-return]


class _BoundedLoader(_Bounds, _SafeLoader):  # type: ignore[valid-type,misc]
    pass


class _BoundedPurePython(_Bounds, yaml.SafeLoader):
    pass


class _Expansion:
    """Sizes a composed document as it would be once every alias is expanded, each node visited once."""

    def __init__(self, *, aliased: bool) -> None:
        self.aliased = aliased
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, levels below it)
        self.open: set[int] = set()

    def measure(self, node: yaml.Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in self.open:
            raise _Refused("an alias (*name) refers to a value that contains it")
        if key not in self.sizes:
            self.open.add(key)
            self.sizes[key] = self._measure_children(node, depth)
            self.open.discard(key)
        values, height = self.sizes[key]
        if depth + height > MAX_YAML_DEPTH:
            raise _Refused(
                f"with its aliases expanded it nests mappings and lists more than {MAX_YAML_DEPTH} levels deep"
            )
        return values, height

    def _measure_children(self, node: yaml.Node, depth: int) -> tuple[int, int]:
        if isinstance(node, yaml.ScalarNode):
            return 1, 0
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        values, height = 1, 1  # a list or mapping is a level even when empty, as the parser counts it
        for child in children:
            child_values, child_height = self.measure(child, depth + 1)
            values += child_values
            height = max(height, child_height + 1)
            if values > MAX_YAML_NODES:
                expanded = " once its aliases (*name) are expanded" if self.aliased else ""
                raise _Refused(f"it holds more than {MAX_YAML_NODES:,} values{expanded}")
        return values, height


def read_yaml(text: str, source_name: str | None = None) -> Any:
    """Reads one YAML document of at most ``MAX_CONFIG_BYTES`` into JSON-like data.

    Raises:
        ConfigError: the text is too large, not valid YAML, holds more than one document, or its
            aliases or nesting are over budget.

    Example:
        >>> read_yaml("a: &x [1, 2]\\nb: *x")
        {'a': [1, 2], 'b': [1, 2]}
    """
    size = len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > MAX_CONFIG_BYTES else len(text)
    check_size(size, source_name)
    loader = _BoundedLoader(text)
    try:
        return to_plain(loader.get_single_data())
    except _Refused as exc:
        raise ConfigError([("", f"refused YAML: {exc}")], source=source_name) from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([("", _syntax_error(text, exc))], source=source_name) from None
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"invalid YAML: {exc}")], source=source_name) from None
    except ValueError as exc:
        # A scalar PyYAML cannot convert: a date such as 2024-13-01, or an integer with more
        # digits than Python converts.
        what = "a number has too many digits" if "digits" in str(exc) else str(exc)
        raise ConfigError([("", f"invalid YAML: {what}")], source=source_name) from None
    finally:
        loader.dispose()


def _syntax_error(text: str, exc: yaml.MarkedYAMLError) -> str:
    """``invalid YAML at line L, column C: problem``, in PyYAML's own words where libyaml's are terser."""
    mark = exc.problem_mark or exc.context_mark
    head = "" if mark is None else "\n".join(text.split("\n", mark.line + 2)[: mark.line + 2])
    # The text up to the line after the error, read again by the pure-Python parser, gives the same
    # error in clearer words; only for a short head, as that parser is about ten times slower.
    if (
        0 < len(head) <= _REREAD_LIMIT
        and _SafeLoader is not yaml.SafeLoader
        and exc.context != _SECOND_DOCUMENT
    ):
        try:
            yaml.load(head, Loader=_BoundedPurePython)  # noqa: S506 - a safe loader
        except yaml.MarkedYAMLError as pure:
            if mark is not None and pure.problem_mark is not None and pure.problem_mark.line == mark.line:
                exc, mark = pure, pure.problem_mark
        except (yaml.YAMLError, _Refused, ValueError):
            pass
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = exc.problem or exc.context or "cannot be parsed"
    if exc.context == _SECOND_DOCUMENT:
        what = "a config is one YAML document, but another one starts here"
    return f"invalid YAML{where}: {what}"


def check_size(size: int, source_name: str | None = None) -> None:
    """Refuses a config text of more than ``MAX_CONFIG_BYTES`` bytes."""
    if size > MAX_CONFIG_BYTES:
        limit = f"at most {MAX_CONFIG_BYTES:,} bytes (1 MiB) are accepted"
        raise ConfigError([("", f"refused: the config is {size:,} bytes; {limit}")], source=source_name)


def to_plain(value: Any) -> Any:
    """JSON-like data: YAML dates become ISO strings and keys become strings, as Determined stores them."""
    if isinstance(value, Mapping):
        return {_key(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):  # YAML 1.1 reads a bare `on:` or `yes:` key as true
        return "true" if key else "false"
    return key if isinstance(key, str) else str(key)
