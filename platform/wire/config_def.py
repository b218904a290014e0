"""How one configuration is parsed, validated and described: Kafka's ConfigDef, shared by topic,
broker, TLS and SASL settings and by DescribeConfigs, so a name, type or range is defined once; and
the Java ``.properties`` files such settings come in (broker, client and data-dir files)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ember import errors

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class ConfigDef:
    """One known config: how to parse and validate it and how to describe it."""
    name: str
    # "int", "long", "double", "boolean", "string" (free text when it has no choices), "list" (comma-
    # separated items, each one of the choices; parsed to the items joined by commas, repeats dropped) or
    # "address" (HOST:PORT, parsed to a tuple)
    type: str
    default: Any
    doc: str
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    choices: tuple[str, ...] = ()
    unsupported: tuple[str, ...] = ()  # values Kafka knows that ember does not support yet
    nullable: bool = False  # None (or "none") means "not set"
    secret: bool = False  # a password or key: never quoted in errors

    @property
    def valid_values(self) -> str:
        """Human-readable allowed values, quoted in errors and DescribeConfigs."""
        if self.type == "list":
            text = f"a comma-separated list of {', '.join(self.choices)}"
        elif self.choices:
            text = ", ".join(self.choices)
        elif self.type == "address":
            text = "HOST:PORT (port 0: any free port)"
        elif self.type == "boolean":
            text = "true, false"
        elif self.type == "string":
            text = "text"
        else:
            low = "..." if self.minimum is None else str(self.minimum)
            high = "..." if self.maximum is None else str(self.maximum)
            text = f"[{low}, {high}]"
        return f"{text} or none" if self.nullable else text

    def parse(self, raw: Any) -> Any:
        """The typed value of ``raw`` (a string from the wire/CLI or a Python value)."""
        if self.nullable and (raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none"))):
            return None
        if self.type == "boolean":
            return self._parse_bool(raw)
        if self.type == "string":
            return self._parse_choice(raw)
        if self.type == "list":
            return self._parse_list(raw)
        if self.type == "double":
            return self._parse_double(raw)
        if self.type == "address":
            return self._parse_address(raw)
        return self._parse_int(raw)

    def _invalid(self, raw: Any, why: str = "") -> errors.InvalidConfig:
        reason = f": {why}" if why else ""
        shown = "[hidden]" if self.secret else repr(raw)
        return errors.InvalidConfig(
            f"invalid value {shown} for {self.name}{reason}; allowed: {self.valid_values}")

    def _parse_bool(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise self._invalid(raw)

    def _parse_choice(self, raw: Any) -> str:
        value = str(raw).strip()
        if value in self.unsupported:
            raise self._invalid(raw, f"{value!r} is not supported yet")
        if self.choices and value not in self.choices:
            raise self._invalid(raw)
        return value

    def _parse_list(self, raw: Any) -> str:
        items: list[str] = []
        for item in (str(part).strip() for part in (raw if isinstance(raw, (list, tuple)) else str(raw).split(","))):
            if item not in self.choices:
                raise self._invalid(raw, f"{item!r} is not one of {', '.join(self.choices)}" if item else "an empty item")
            if item not in items:
                items.append(item)
        return ",".join(items)

    def _parse_double(self, raw: Any) -> float:
        if isinstance(raw, bool):
            raise self._invalid(raw)
        try:
            value = float(raw.strip()) if isinstance(raw, str) else float(raw)
        except (TypeError, ValueError):
            raise self._invalid(raw) from None
        if value != value or (self.minimum is not None and value < self.minimum) or \
                (self.maximum is not None and value > self.maximum):
            raise self._invalid(raw)
        return value

    def _parse_address(self, raw: Any) -> tuple[str, int]:
        host, sep, port = str(raw).strip().rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise self._invalid(raw)
        return host, int(port)

    def _parse_int(self, raw: Any) -> int:
        if isinstance(raw, bool):
            raise self._invalid(raw)
        try:
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
        except (TypeError, ValueError):
            raise self._invalid(raw) from None
        if value != raw and not isinstance(raw, str):
            raise self._invalid(raw)
        if (self.minimum is not None and value < self.minimum) or \
                (self.maximum is not None and value > self.maximum):
            raise self._invalid(raw)
        return value


@dataclass(frozen=True)
class ConfigSynonym:
    """A setting that could supply a config's value, and where it is set (Kafka's synonyms)."""
    name: str
    value: Optional[str]
    source: str   # "topic", "broker" or "default"


@dataclass(frozen=True)
class ConfigEntry:
    """One DescribeConfigs entry: a config's effective value (None: unset, or secret) and where
    it comes from; ``synonyms`` lists every setting that could supply it, most specific first."""
    name: str
    value: Optional[str]
    default: bool
    doc: str
    type: str
    source: str
    synonyms: tuple[ConfigSynonym, ...]
    sensitive: bool = False   # a password or key: its value is never sent, as Kafka does


def read_properties(path: Path, *, strict: bool = True) -> dict[str, str]:
    """A Java-style ``.properties`` file (``key=value``, ``#``/``!`` comments, a trailing ``\\``
    continues the value on the next line, as inline PEM certificates are written) as a dict; a
    line that is no ``key=value`` raises InvalidConfig, or is skipped when not ``strict``."""
    result: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = pending + raw.strip()
        if pending == "" and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            if not strict:
                continue
            raise errors.InvalidConfig(f"{path}:{number}: expected key=value, got {raw!r}")
        result[line[:sep].strip()] = line[sep + 1:].strip()
    return result
