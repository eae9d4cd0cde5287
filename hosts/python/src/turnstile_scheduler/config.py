"""Config layers and the validated `Policy`.

A layer is TOML text, JSON text (a text that starts with `{`), or plain data of the same shape
(`{"conversation": {"tools": {...}}}`), which crosses as JSON text (see `_json_layer`), so all
resolve alike and diagnostics name the same key paths and tools, and point at the layer's own
lines. Layers are a list, lowest precedence first; each is a `Layer`, a
`(name, source)` pair, or an object with `.name` and `.text`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from . import _check, _json_layer
from ._component import Instance, shared_instance
from .errors import ConfigError, DisposedError
from .types import (
    Concurrency,
    Diagnostic,
    DiagnosticCode,
    Label,
    OnError,
    RateWindow,
    Severity,
    Span,
    ToolPolicy,
)

LIMIT_UNBOUNDED = 2**32 - 1
"""`Concurrency.limit` of a key that is unbounded but spaced (`limit = 0` with a delay or a
retry cap): the component's `none`."""

Source = Union[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Layer:
    """One config layer: `name` appears in diagnostics (a file name, "user", "plugin: x");
    `source` is TOML text or plain data of the same shape."""

    name: str
    source: Source


def layer_texts(layers: Any) -> list[tuple[str, str]]:
    """`(name, text)` for each layer (TOML, or JSON); TypeError or ValueError for a wrong shape."""
    if isinstance(layers, (str, bytes)) or isinstance(layers, Mapping) or isinstance(layers, Layer):
        raise TypeError(
            f"layers must be a list of layers (Layer, (name, source) pairs), not a single {type(layers).__name__}; "
            "wrap it in a list"
        )
    items = _check.sequence(layers, "layers")
    out = []
    for i, layer in enumerate(items):
        what = f"layers[{i}]"
        if isinstance(layer, Layer):
            name, source = layer.name, layer.source
        elif isinstance(layer, tuple):
            if len(layer) != 2:
                raise TypeError(f"{what} must be a (name, source) pair, not a tuple of {len(layer)}")
            name, source = layer
        elif hasattr(layer, "name") and hasattr(layer, "text"):
            name, source = layer.name, layer.text
        else:
            raise TypeError(f"{what} must be a Layer or a (name, source) pair, not {type(layer).__name__}")
        name = _check.string(name, f"{what}.name")
        if isinstance(source, str):
            text = _check.string(source, f"{what}.source")
        elif isinstance(source, Mapping):
            text = _json_layer.dumps(source, f"{what}.source")
        else:
            raise TypeError(f"{what}.source must be TOML or JSON text (str) or a dict, not {type(source).__name__}")
        out.append((name, text))
    return out


class Policy:
    """A validated config. Build one with `Policy.resolve`; immutable, and any number of
    schedulers can be built from one (each resolves the same layers in its own instance)."""

    def __init__(self, instance: Instance, resource: Any, layers: list[tuple[str, str]]) -> None:
        self.instance = instance
        self._resource = resource
        self.layers: tuple[tuple[str, str], ...] = tuple(layers)
        """The layers as resolved: `(name, text)`, plain data already written as JSON."""
        self._templates: Optional[dict[str, tuple[str, ...]]] = None
        self._shared: Optional[dict[str, ToolPolicy]] = None
        # A policy nobody closes is freed in the component when it is collected (each
        # `Policy.resolve` would otherwise keep one more policy in the shared instance).
        self._finalizer = weakref.finalize(self, _free, instance, resource)

    @classmethod
    def resolve(cls, layers: Sequence[Any], instance: Optional[Instance] = None) -> "Policy":
        """Resolves the layers, lowest precedence first; raises `ConfigError` with every
        diagnostic, TypeError or ValueError for a wrong shape."""
        if instance is not None and not isinstance(instance, Instance):
            raise TypeError(f"instance must be an Instance, not {type(instance).__name__}")
        texts = layer_texts(layers)
        inst = instance or shared_instance()
        return cls(inst, resolve_in(inst, texts), texts)

    def _live(self) -> Any:
        if self._resource is None:
            raise DisposedError("the policy")
        return self._resource

    def resource_in(self, instance: Instance) -> Any:
        """This policy's resource in `instance` (resolved there again when it is another; a
        closed policy's layers still resolve elsewhere)."""
        if instance is self.instance:
            self.instance.check()
            return self._live()
        return resolve_in(instance, list(self.layers))

    def release_in(self, instance: Instance, resource: Any) -> None:
        """Frees what `resource_in(instance)` resolved anew (a scheduler borrows its policy only
        while it is built); the policy's own resource stays."""
        if resource is not self._resource:
            _free(instance, resource)

    def tool(self, name: str) -> ToolPolicy:
        """A tool's policy; an unconfigured tool is unbounded without fan-out."""
        return _tool(self.instance.func("config", "[method]policy.tool")(self._live(), _check.string(name, "name")))

    def tools(self) -> list[ToolPolicy]:
        """Every configured tool, in configuration order."""
        return [_tool(t) for t in self.instance.func("config", "[method]policy.tools")(self._live())]

    def templates_in(self, instance: Instance, resource: Any) -> dict[str, tuple[str, ...]]:
        """Each tool with a key template, with the arguments its keys name (every member's of a
        key set, each once, in written order): a scheduler sends a call's arguments only for
        these tools. Read once, from `resource` (this policy in `instance`, as `resource_in`
        gave it)."""
        if self._templates is None:
            tools = [_tool(t) for t in instance.func("config", "[method]policy.tools")(resource)]
            self._templates = {t.name: t.arguments for t in tools if t.arguments}
            self._shared = {t.name: t for t in tools if any(c.shared for c in t.concurrency)}
        return self._templates

    def shared_in(self, instance: Instance, resource: Any) -> dict[str, ToolPolicy]:
        """Each tool whose key is shared (`shared = true`), with its policy (read with
        `templates_in`). A tool has at most one shared key (the config refuses two in a key
        set)."""
        self.templates_in(instance, resource)
        return dict(self._shared or {})

    def warnings(self) -> list[Diagnostic]:
        """The warnings of this resolved policy, in source order (a name a small edit away from
        one Turnstile reads, such as `concurency`); empty for most configs."""
        return [_diagnostic(d) for d in self.instance.func("config", "[method]policy.warnings")(self._live())]

    def fingerprint(self) -> int:
        """What the policy means to a scheduler, as 64 bits: equal for policies that schedule
        alike. A saved state records it (``SavedState.policy``), so a host can tell before
        ``resume`` whether the policy changed since the state was saved."""
        return int(self.instance.func("config", "[method]policy.fingerprint")(self._live()))

    def close(self) -> None:
        """Frees the policy in the component; schedulers built from it keep working."""
        if self._resource is not None:
            self._resource = None
            self._finalizer()

    def __enter__(self) -> "Policy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _free(instance: Instance, resource: Any) -> None:
    """Drops a policy's resource in its instance (nothing to do in a broken one)."""
    try:
        instance.drop(resource)
    except Exception:  # the instance broke: its memory went with it
        pass


def resolve_in(instance: Instance, texts: list[tuple[str, str]]) -> Any:
    from types import SimpleNamespace

    wit = [SimpleNamespace(name=n, text=t) for n, t in texts]
    result = instance.func("config", "[static]policy.resolve")(wit)
    if isinstance(result, list):
        raise ConfigError([_diagnostic(d) for d in result])
    return result


def _diagnostic(d: Any) -> Diagnostic:
    labels = [
        Label(
            span=Span(
                layer=l.span.layer,
                layer_name=getattr(l.span, "layer-name"),
                start=l.span.start,
                end=l.span.end,
                line=l.span.line,
                column=l.span.column,
            ),
            message=l.message,
        )
        for l in d.labels
    ]
    severity = Severity.WARNING if getattr(d, "severity", "error") == "warning" else Severity.ERROR
    return Diagnostic(_code(d.code), d.message, list(d.path), list(d.tools), labels, d.help, d.rendered, severity)


def _code(code: str) -> "DiagnosticCode | str":
    try:
        return DiagnosticCode(code)
    except ValueError:  # a code from a newer component
        return code


def _tool(t: Any) -> ToolPolicy:
    return ToolPolicy(
        name=t.name,
        concurrency=tuple(_concurrency(c) for c in t.concurrency),
        fan_out=getattr(t, "fan-out"),
        on_error=OnError(getattr(t, "on-error")),
    )


def _concurrency(c: Any) -> Concurrency:
    return Concurrency(
        key=c.key,
        # The component says none for an unbounded but spaced (or capped) key; the package's
        # spelling is the old magic number (see `Concurrency`).
        limit=LIMIT_UNBOUNDED if c.limit is None else c.limit,
        delay_ms=getattr(c, "delay-ms"),
        retries=c.retries,
        arguments=tuple(c.arguments),
        shared=bool(c.shared),
        max_wait_ms=getattr(c, "max-wait-ms"),
        rates=tuple(RateWindow(w.count, getattr(w, "per-ms"), w.burst) for w in c.rates),
        burst=c.burst,
        weight=c.weight,
        adapt_min=getattr(c, "adapt-min"),
        path=c.path,
    )
