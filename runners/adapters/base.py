"""What every adapter shares: finding the output files a suite declared, reading JSON and JSON
Lines the way the tools write them, typed field access whose errors name file, line and field,
and a collector that merges repeated runs into per-metric sample lists.
"""
from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

HIGHER = "higher_is_better"
LOWER = "lower_is_better"


class AdapterError(ValueError):
    """A tool's output cannot be turned into a results document. The message names the file,
    the line (1-based, 0 when the whole file is meant) and the field."""

    def __init__(self, file: str | Path, message: str, *, line: int = 0, field: str | None = None) -> None:
        self.file = str(file)
        self.line = line
        self.field = field
        self.message = message
        where = self.file + (f", line {line}" if line else "") + (f", field {field!r}" if field else "")
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Record:
    """One JSON object from an output file, with where it came from."""
    file: Path
    line: int  # 1-based line of the object's first character; 0 for a whole-file JSON object
    data: Mapping[str, Any]
    run: int   # 1-based repeat the file belongs to

    def error(self, message: str, field: str | None = None) -> AdapterError:
        return AdapterError(self.file, message, line=self.line, field=field)

    def has(self, key: str) -> bool:
        return key in self.data

    def number(self, key: str, *, optional: bool = False) -> float | None:
        """A finite number (not a bool). Missing or null: an error unless `optional`."""
        if key not in self.data or self.data[key] is None:
            if optional:
                return None
            raise self.error("missing" if key not in self.data else "is null, expected a number", key)
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"must be a number, got {type(value).__name__} {value!r:.60}", key)
        if not math.isfinite(value):
            raise self.error(f"must be finite, got {value}", key)
        return float(value)

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if key not in self.data:
            raise self.error("missing", key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"must be an integer, got {type(value).__name__} {value!r:.60}", key)
        return value

    def string(self, key: str, *, optional: bool = False) -> str | None:
        if key not in self.data or self.data[key] is None:
            if optional:
                return None
            raise self.error("missing", key)
        value = self.data[key]
        if not isinstance(value, str):
            raise self.error(f"must be a string, got {type(value).__name__} {value!r:.60}", key)
        return value


def _keep_constant(name: str) -> float:
    # The tools write Python's json.dumps output, which spells an unlimited request rate as
    # Infinity; such values are allowed in configuration fields and refused in measured ones.
    return float(name.replace("Infinity", "inf"))


def _decode_error(path: Path, text: str, exc: json.JSONDecodeError, base_line: int) -> AdapterError:
    line = base_line + exc.lineno - 1
    at_end = exc.pos >= len(text.rstrip())
    if at_end and not text.endswith("\n"):
        return AdapterError(path, f"truncated mid-line: the JSON ends before it is complete ({exc.msg})", line=line)
    return AdapterError(path, f"not valid JSON: {exc.msg} (column {exc.colno})", line=line)


def read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AdapterError(path, "missing: the command did not write it") from None
    except OSError as exc:
        raise AdapterError(path, f"cannot be read: {exc.strerror}") from None
    if not raw.strip():
        raise AdapterError(path, "is empty: the command wrote no results into it")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AdapterError(path, f"is not UTF-8 text (byte {exc.start})") from None


def read_jsonl(path: Path, run: int) -> list[Record]:
    """Each non-blank line one JSON object (what `open(f, "a").write(json.dumps(r) + "\\n")` makes)."""
    text = read_text(path)
    records = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = number == len(lines)  # no newline after it
        try:
            data = json.loads(line, parse_constant=_keep_constant)
        except json.JSONDecodeError as exc:
            if last:  # the tools end every line with a newline; this one was cut off
                raise AdapterError(path, f"truncated mid-line: the last line has no newline and is incomplete JSON "
                                         f"({exc.msg})",
                                   line=number) from None
            raise AdapterError(path, f"not valid JSON: {exc.msg} (column {exc.colno})", line=number) from None
        if not isinstance(data, dict):
            raise AdapterError(path, f"must hold JSON objects, got {type(data).__name__}", line=number)
        records.append(Record(file=path, line=number, data=data, run=run))
    return records


def read_json_or_lines(path: Path, run: int) -> list[Record]:
    """One JSON object (possibly indented, as `json.dump(r, f, indent=4)` writes it), or several
    one per line (as an appending tool writes them)."""
    text = read_text(path)
    try:
        data = json.loads(text, parse_constant=_keep_constant)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith("{") and "\n{" in text:
            return read_jsonl(path, run)
        raise _decode_error(path, text, exc, 1) from None
    if not isinstance(data, dict):
        raise AdapterError(path, f"must hold a JSON object, got {type(data).__name__}")
    return [Record(file=path, line=0, data=data, run=run)]


def resolve_outputs(run_dir: Path, patterns: Sequence[str]) -> list[Path]:
    """The files the suite declared, relative to one run's output directory. Every pattern must
    match at least one file; none may point outside the directory."""
    root = run_dir.resolve()
    found: list[Path] = []
    for pattern in patterns:
        if os.path.isabs(pattern) or ".." in Path(pattern).parts:
            raise AdapterError(pattern, "outputs must be relative to $PARALLAX_OUTPUT_DIR and stay inside it")
        if glob.has_magic(pattern):
            matches = sorted(Path(p) for p in glob.glob(str(root / pattern), recursive=True))
            matches = [m for m in matches if m.is_file()]
            if not matches:
                raise AdapterError(root / pattern, "missing: no file matched this output pattern")
        else:
            path = root / pattern
            if not path.is_file():
                raise AdapterError(path, "missing: the command did not write it")
            matches = [path]
        for match in matches:
            if not match.resolve().is_relative_to(root):
                raise AdapterError(match, "resolves outside $PARALLAX_OUTPUT_DIR (a symbolic link?)")
            if match not in found:
                found.append(match)
    return found


def series_name(metric: str, params: Iterable[tuple[str, Any]]) -> str:
    """`decode_throughput[bs=32,in=1024,out=256]`: the configuration in a fixed order, so the same
    configuration names the same series at every commit."""
    parts = [f"{key}={format_param(value)}" for key, value in params if value is not None]
    return f"{metric}[{','.join(parts)}]" if parts else metric


def format_param(value: Any) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


@dataclass
class MetricSpec:
    """How one tool field becomes a metric."""
    field: str
    name: str
    unit: str
    direction: str
    required: bool = False


@dataclass
class Collector:
    """Samples per metric across every record of every run, in first-seen order."""
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, name: str, unit: str, direction: str, value: float) -> None:
        entry = self.metrics.setdefault(name, {"name": name, "unit": unit, "direction": direction, "samples": []})
        entry["samples"].append(value)

    def add_specs(self, record: Record, specs: Sequence[MetricSpec], params: Sequence[tuple[str, Any]]) -> None:
        for spec in specs:
            value = record.number(spec.field, optional=not spec.required)
            if value is not None:
                self.add(series_name(spec.name, params), spec.unit, spec.direction, value)

    def as_list(self) -> list[dict[str, Any]]:
        return list(self.metrics.values())


# tool -> the keys every record it writes carries; filled in by each adapter module.
SIGNATURES: dict[str, tuple[str, ...]] = {}


def register_signature(tool: str, keys: Sequence[str]) -> tuple[str, ...]:
    SIGNATURES[tool] = tuple(keys)
    return SIGNATURES[tool]


def identify(data: Mapping[str, Any]) -> str | None:
    """Which known tool writes records with these keys, if any."""
    matching = [tool for tool, keys in SIGNATURES.items() if all(k in data for k in keys)]
    return max(matching, key=lambda t: len(SIGNATURES[t])) if matching else None


def require_signature(record: Record, tool: str) -> None:
    """Refuse a record that lacks the tool's identifying keys, saying which tool wrote it when
    that can be told."""
    for key in SIGNATURES[tool]:
        if key not in record.data:
            other = identify(record.data)
            hint = f"; it looks like {other} output" if other and other != tool else ""
            raise record.error(f"missing: this is not {tool} output{hint}", key)


@dataclass
class Converted:
    """What an adapter makes of a job's runs: metrics with one sample list each, the optional
    per-question correctness vector, and stable facts about the measured configuration."""
    metrics: list[dict[str, Any]]
    items: dict[str, Any] | None = None
    context: dict[str, Any] = field(default_factory=dict)


def records_of(runs: Sequence[Sequence[Path]], reader: Any = None) -> list[Record]:
    """Every record of every run's files, in run order then file order."""
    read = reader or read_jsonl
    out: list[Record] = []
    for run, files in enumerate(runs, start=1):
        for path in files:
            out.extend(read(path, run))
    return out


def one_value(records: Sequence[Record], key: str, *, what: str) -> Any:
    """A configuration field every record must agree on (e.g. the model)."""
    values = {json.dumps(r.data.get(key), sort_keys=True) for r in records}
    if len(values) > 1:
        first = records[0]
        other = next(r for r in records if json.dumps(r.data.get(key), sort_keys=True)
                     != json.dumps(first.data.get(key), sort_keys=True))
        raise other.error(f"differs from {first.file}, line {first.line} ({what} must be the same in every run)", key)
    return records[0].data.get(key) if records else None
