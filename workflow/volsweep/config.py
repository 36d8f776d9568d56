"""Workflow configuration: schema validation with defaults, semantic checks, volumes, estimate.

Every mistake in a config is reported at once, one line each, naming the file
(or ``--config`` for a value given on the command line), the key and the
value, before any job runs.  :class:`ConfigError` is a :class:`SystemExit`, so
the workflow stops with those lines alone and a non-zero status, no traceback.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import re
import stat
import sys
from pathlib import Path

import jsonschema
import numpy as np
import yaml

from volsweep.engine.wavelet import angle_values  # noqa: F401 (part of the config API)

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"
FORMATS = ("npy", "tif", "zarr", "h5", "raw")
MB = 2**20
SHEET_COLUMNS = ("name", "path", "format", "dataset", "shape", "dtype", "offset", "spacing", "unit", "axes")
#: Volume names: letters, digits, ``_ . -``, starting with a letter or digit, at most MAX_NAME long.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAX_NAME = 100
#: Names that collide with an output folder (``results/summary/``).
RESERVED_NAMES = frozenset({"summary"})
#: Folders the workflow writes: no input may live in them.
OUTPUT_FOLDERS = ("results", "logs", ".snakemake")
#: Largest volume sheet read (bytes).
MAX_SHEET_BYTES = 16 * MB
#: Inputs up to this many bytes are scanned at validation for an empty or full phase.
SCAN_BYTES = 4 * MB
_MISSING = object()


class ConfigError(SystemExit):
    """Configuration or volume-sheet mistakes, one line each naming file, key and value.

    A :class:`SystemExit` (its ``code`` is the message): raised from the
    Snakefile it ends the run with the lines alone, no traceback.  ``lines``
    holds the individual mistakes.
    """

    def __init__(self, lines):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))

    def __str__(self):
        return "\n".join(self.lines)


def _key_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def _validator_with_defaults(schema):
    base = jsonschema.validators.validator_for(schema)

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})(schema)


def load_schema(path=SCHEMA_PATH) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh)


# ----------------------------------------------------------------------------- strict YAML
def duplicate_keys(text: str, source: str) -> list[str]:
    """One line per mapping key that appears twice in a YAML document (YAML loaders keep the last).

    Examples
    --------
    >>> duplicate_keys("sweep:\\n  a: 1\\n  a: 2\\n", "my.yaml")
    ['my.yaml:3: key sweep.a appears twice (first on line 2); the second value would silently win']
    """
    out = []

    def walk(node, path):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key != "<<":
                    line = key_node.start_mark.line + 1
                    if key in seen:
                        out.append(f"{source}:{line}: key {_key_path(path + [key])} appears twice "
                                   f"(first on line {seen[key]}); the second value would silently win")
                    else:
                        seen[key] = line
                walk(value_node, path + [key])
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + [i])

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser where PyYAML has it
    for doc in yaml.compose_all(text, Loader=loader):
        walk(doc, [])
    return out


class _Sources:
    """The config file(s) behind a config, re-read strictly, to blame each value on its origin."""

    def __init__(self, configfile):
        self.label = "config" if configfile is None else str(configfile)
        self.files, self.errors = [], []
        if configfile is None:
            return
        parts = configfile if isinstance(configfile, (list, tuple)) else str(configfile).split(", ")
        for part in parts:
            path = Path(str(part))
            if not path.is_file():
                continue
            try:
                text = path.read_text()
                self.errors += duplicate_keys(text, str(part))
                self.files.append((str(part), yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}))
            except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
                first = str(exc).strip().splitlines()[0]
                self.errors.append(f"{part}: not readable YAML: {first}")
        if len(self.files) == 1:
            self.label = self.files[0][0]

    def __call__(self, parts, value=_MISSING) -> str:
        """The file a value at key path ``parts`` came from, or ``--config``."""
        if not self.files:
            return self.label
        for name, data in reversed(self.files):
            node, found = data, True
            for p in parts:
                if isinstance(node, dict) and p in node:
                    node = node[p]
                elif isinstance(node, list) and isinstance(p, int) and p < len(node):
                    node = node[p]
                else:
                    found = False
                    break
            if found:
                if value is _MISSING or _same(node, value):
                    return name
                return "--config"
        return "--config"


def _same(a, b) -> bool:
    try:
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------- checks
def _non_finite(node, path=()):
    """Key paths of every NaN or infinite number in a nested config."""
    if isinstance(node, float) and not math.isfinite(node):
        yield list(path), node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _non_finite(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _non_finite(v, path + (i,))


def volume_name_problem(name) -> str | None:
    """Why ``name`` cannot be a volume name (it becomes ``results/<name>/``), or None.

    Examples
    --------
    >>> volume_name_problem("sample_1.a") is None
    True
    >>> volume_name_problem("../x")
    "may hold only letters, digits, '_', '.' and '-', starting with a letter or digit (no path separators, wildcards, braces or spaces)"
    """
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long, more than {MAX_NAME}"
    if not NAME_PATTERN.match(name):
        return ("may hold only letters, digits, '_', '.' and '-', starting with a letter or digit "
                "(no path separators, wildcards, braces or spaces)")
    if ".." in name:
        return "must not contain '..'"
    if name.lower() in RESERVED_NAMES:
        return f"is reserved: results/{name.lower()}/ holds the summaries of every volume"
    return None


def _schema_line(err, blame) -> list[str]:
    parts = list(err.absolute_path)
    where = _key_path(parts)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = set(err.schema.get("properties", {}))
        out = []
        for key in sorted(set(err.instance) - known, key=str):
            src = blame(parts + [key])
            out.append(f"{src}: unknown key {where + '.' if parts else ''}{key} "
                       f"(allowed: {', '.join(sorted(known))})")
        return out
    if err.validator == "oneOf":
        alts = err.schema.get("oneOf", [])
        if alts and all(set(a) == {"required"} for a in alts):
            choices = " or ".join(" + ".join(a["required"]) for a in alts)
            return [f"{blame(parts, err.instance)}: {where}: give exactly one of {choices} "
                    f"(has: {', '.join(sorted(map(str, err.instance))) or 'nothing'})"]
        if err.context:
            def fits(e):  # the alternative made for this kind of value (a number, a list, ...)
                alt = alts[e.schema_path[0]] if e.schema_path and isinstance(e.schema_path[0], int) else {}
                types = alt.get("type")
                types = [types] if isinstance(types, str) else types or []
                checker = jsonschema.Draft202012Validator.TYPE_CHECKER
                return not types or any(checker.is_type(err.instance, t) for t in types)

            fitting = ([e for e in err.context if e.validator != "type" and fits(e)]
                       or [e for e in err.context if e.validator != "type"] or err.context)
            sub = jsonschema.exceptions.best_match(fitting)
            return [f"{blame(list(sub.absolute_path), sub.instance)}: {_key_path(sub.absolute_path)} = "
                    f"{sub.instance!r}: {sub.message}"]
    return [f"{blame(parts, err.instance)}: {where} = {err.instance!r}: {err.message}"]


def _schema_errors(config, blame, schema_path) -> list[str]:
    bad_paths = set()
    lines = []
    for path, value in _non_finite(config):
        bad_paths.add(tuple(path))
        lines.append(f"{blame(path, value)}: {_key_path(path)} = {value}: not a finite number")
    validator = _validator_with_defaults(load_schema(schema_path))
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    for err in errors:
        path = tuple(err.absolute_path)
        if any(path[:len(b)] == b for b in bad_paths):
            continue
        lines += _schema_line(err, blame)
    return lines


def check_config(config: dict, configfile=None) -> None:
    """Checks the schema cannot express; raises :class:`ConfigError` with every line."""
    lines = _semantic_errors(config, _Sources(configfile))
    if lines:
        raise ConfigError(lines)


def _semantic_errors(config: dict, blame) -> list[str]:
    def src(*parts):
        return blame(list(parts))

    lines = []

    def guard(fn):
        try:
            fn()
        except (KeyError, TypeError, ValueError, IndexError, ArithmeticError):  # the schema named it
            pass

    def storage():
        chunks, shards = config["storage"]["chunks"], config["storage"]["shards"]
        if any(s % c for c, s in zip(chunks, shards)):
            lines.append(f"{src('storage', 'chunks')}: storage.chunks = {chunks} must divide "
                         f"storage.shards = {shards}")

    def angles():
        for name in ("theta", "phi"):
            grid = config["sweep"][name]
            if "values" in grid:
                values = np.asarray(grid["values"], dtype=np.float64)
                if np.any(np.diff(values) <= 0):
                    lines.append(f"{src('sweep', name, 'values')}: sweep.{name}.values = {grid['values']}: "
                                 "must be strictly increasing (sorted, no repeated angle)")

    def auto_scale():
        if config["sweep"]["enabled"] and config["sweep"]["a"] == "auto" and not config["thickness"]["enabled"]:
            lines.append(f"{src('sweep', 'a')}: sweep.a = auto: derives the scale from the local "
                         "thickness, which is off (thickness.enabled: false); give a number or enable it")

    def stats():
        sweep, report = config["sweep"], config["report"]
        if sweep["enabled"] and report["enabled"] and "energy" not in sweep["stats"]:
            lines.append(f"{src('sweep', 'stats')}: sweep.stats = {sweep['stats']}: must include energy "
                         "while report.enabled is true (the energy maps and the dominant orientation "
                         "are made from it); add energy or set report.enabled: false")

    def thickness():
        th = config["thickness"]
        shards = config["storage"]["shards"]
        if th["threshold"] is not None and th["label"] is not None:
            lines.append(f"{src('thickness')}: thickness.threshold = {th['threshold']} and thickness.label = "
                         f"{th['label']}: set only one of them")
        if th["enabled"] and th["threshold"] is None and th["label"] is None:
            lines.append(f"{src('thickness')}: thickness: set thickness.threshold (a number, or otsu, li, "
                         "yen) or thickness.label to select the phase")
        if isinstance(th["chunk"], list) and any(c % s for c, s in zip(th["chunk"], shards)):
            lines.append(f"{src('thickness', 'chunk')}: thickness.chunk = {th['chunk']} must be a multiple "
                         f"of storage.shards = {shards} (concurrent writers must not share a shard)")
        bins = th["bins"]
        if isinstance(bins, list) and np.any(np.diff(bins) <= 0):
            lines.append(f"{src('thickness', 'bins')}: thickness.bins = {bins} must be strictly increasing")

    def volumes():
        if not config["volumes"] and not config.get("volume_sheet"):
            lines.append(f"{src('volumes')}: volumes = {{}}: give at least one volume or a volume_sheet")
        for name in config["volumes"]:
            problem = volume_name_problem(name)
            if problem:
                shown = name if isinstance(name, str) and NAME_PATTERN.match(name) and len(name) <= MAX_NAME \
                    else repr(str(name)[:120])
                lines.append(f"{src('volumes', name)}: volumes.{shown}: the volume name {problem}")

    for fn in (storage, angles, auto_scale, stats, thickness, volumes):
        guard(fn)
    return lines


# ----------------------------------------------------------------------------- volume sheet
def _parse_triple(text: str, kind, where: str) -> list:
    parts = [p for p in str(text).replace("x", ",").replace(" ", ",").split(",") if p]
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{where} = {text!r}: expected three numbers like 1,1,1") from None
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{where} = {text!r}: expected three finite numbers like 1,1,1")
    return values


def _regular_file(path: Path, what: str) -> str | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{what} = {str(path)!r}: file not found"
    except OSError as exc:
        return f"{what} = {str(path)!r}: {exc.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return f"{what} = {str(path)!r}: is a folder, not a TSV file"
    if not stat.S_ISREG(st.st_mode):
        return f"{what} = {str(path)!r}: is not a regular file (a FIFO or a device); it is never opened"
    if st.st_size > MAX_SHEET_BYTES:
        return f"{what} = {str(path)!r}: {st.st_size} bytes, more than {MAX_SHEET_BYTES} for a volume sheet"
    return None


def _read_sheet(path: Path) -> tuple[dict, dict, list[str]]:
    """(volumes, line of each volume, error lines) of a TSV sheet."""
    problem = _regular_file(path, "volume_sheet")
    if problem:
        return {}, {}, [problem]
    volumes, lines_of, errors = {}, {}, []
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return {}, {}, [f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t")
    fields = [f.strip() for f in (reader.fieldnames or ())]
    reader.fieldnames = fields
    unknown = [f for f in fields if f not in SHEET_COLUMNS]
    if unknown or "name" not in fields or len(set(fields)) != len(fields):
        return {}, {}, [f"{path}:1: columns {fields} (unknown {unknown}); allowed: "
                        f"{', '.join(SHEET_COLUMNS)}, each once, with 'name' required"]
    folded = {}
    for row in reader:
        line = reader.line_num
        where = f"{path}:{line}"
        extra = row.pop(None, None)
        if extra is not None:
            errors.append(f"{where}: {len(fields) + len(extra)} fields, the header has {len(fields)} "
                          f"columns (extra: {extra[:3]!r})")
            continue
        name = (row.pop("name") or "").strip()
        if not name:
            if any((v or "").strip() for v in row.values()):
                errors.append(f"{where}: name is empty")
            continue
        problem = volume_name_problem(name)
        if problem:
            errors.append(f"{where}: name = {name[:120]!r}: the volume name {problem}")
            continue
        if name in volumes or name.lower() in folded:
            first = name if name in volumes else folded[name.lower()]
            errors.append(f"{where}: name = {name!r} appears twice (first as {first!r} on line "
                          f"{lines_of[first]})")
            continue
        entry = {k: v.strip() for k, v in row.items() if v and v.strip()}
        try:
            for key in ("shape", "spacing"):
                if key in entry:
                    entry[key] = _parse_triple(entry[key], int if key == "shape" else float,
                                               f"{where}: {key}")
            if "offset" in entry:
                try:
                    entry["offset"] = int(entry["offset"])
                except ValueError:
                    raise ConfigError(f"{where}: offset = {entry['offset']!r}: not a whole number of "
                                      "bytes") from None
        except ConfigError as exc:
            errors += exc.lines
            continue
        volumes[name], lines_of[name], folded[name.lower()] = entry, line, name
    return volumes, lines_of, errors


def read_volume_sheet(path: Path) -> dict:
    """Volumes from a TSV sheet with a header row (see :data:`SHEET_COLUMNS`).

    UTF-8 (a byte-order mark is allowed); ``shape``/``spacing`` as ``800x800x200``
    or ``1,1,2``.  Raises :class:`ConfigError` with one line per bad row.
    """
    volumes, _, errors = _read_sheet(Path(path))
    if errors:
        raise ConfigError(errors)
    return volumes


# ----------------------------------------------------------------------------- volumes
def _volume_validator():
    schema = load_schema()
    return _validator_with_defaults({"$schema": schema["$schema"], "definitions": schema["definitions"],
                                     "$ref": "#/definitions/volume"})


def _inside(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


#: Entries validate_config has just checked, taken once by the next volume_entries call.
_CACHE = {}


def _fingerprint(config, base) -> str:
    return json.dumps([config.get("volumes"), config.get("volume_sheet"), config.get("allow_outside_paths"),
                       config.get("ingest_buffer_mb"), str(base)], sort_keys=True, default=str)


def _volume_entries(config: dict, base: Path, blame) -> tuple[dict, list[str]]:
    """(normalised entries, error lines): every volume checked, each reported on its own line."""
    from volsweep.io.readers import DEFAULT_MEMORY_BUDGET, VolumeError, open_volume

    errors = []
    validator = _volume_validator()
    volumes = {name: dict(entry) for name, entry in (config.get("volumes") or {}).items()
               if isinstance(entry, dict) and not any(True for _ in validator.iter_errors(copy.deepcopy(entry)))
               and not any(True for _ in _non_finite(entry))}
    sources = {name: blame(["volumes", name]) for name in volumes}
    if config.get("volume_sheet"):
        raw = Path(str(config["volume_sheet"]))
        sheet = (raw if raw.is_absolute() else base / raw)
        if not _inside(sheet.resolve(), base) and not config.get("allow_outside_paths"):
            errors.append(f"{blame(['volume_sheet'])}: volume_sheet = {str(raw)!r} leaves the project "
                          f"directory {base}")
        else:
            rows, lines_of, sheet_errors = _read_sheet(sheet)
            errors += sheet_errors
            folded = {n.lower(): n for n in volumes}
            for name, entry in rows.items():
                where = f"{sheet}:{lines_of[name]}"
                if name in volumes or name.lower() in folded:
                    errors.append(f"{where}: volume {name!r} is also defined in {sources.get(name) or blame(['volumes'])}")
                    continue
                bad = [f"{where}: volumes.{name}.{_key_path(e.absolute_path)} = {e.instance!r}: {e.message}"
                       if e.absolute_path else f"{where}: volumes.{name}: {e.message}"
                       for e in validator.iter_errors(entry)]
                if bad:
                    errors += bad
                    continue
                volumes[name], sources[name] = entry, where
    folded = {}
    for name in volumes:
        other = folded.setdefault(str(name).lower(), name)
        if other != name:
            errors.append(f"{sources[name]}: volumes.{name} and volumes.{other} differ only in case "
                          "(their results folders would collide on a case-insensitive file system)")
    budget = config.get("ingest_buffer_mb")
    budget = DEFAULT_MEMORY_BUDGET if budget is None else budget * MB
    allow_outside = bool(config.get("allow_outside_paths"))
    out = {}
    for name, entry in volumes.items():
        if volume_name_problem(name):
            continue  # reported by the name check
        where = f"{sources[name]}: volumes.{name}"
        if "synthetic" in entry:  # made at ingest from the config: nothing to open now
            entry["spacing"] = [float(v) for v in entry.get("spacing", (1.0, 1.0, 1.0))]
            entry.setdefault("axes", "xyz")
            out[name] = entry
            continue
        if "format" not in entry or "path" not in entry:
            continue  # reported by the schema
        fmt = "tif" if entry["format"] == "tiff" else entry["format"]
        entry["format"] = fmt
        raw_path = Path(entry["path"])
        path = (raw_path if raw_path.is_absolute() else base / raw_path).resolve()
        outside = not _inside(path, base)
        if outside and not (raw_path.is_absolute() and allow_outside):
            errors.append(f"{where}.path = {entry['path']!r} leaves the project directory "
                          f"{base}; use an absolute path and allow_outside_paths: true")
            continue
        inner = [f for f in OUTPUT_FOLDERS if _inside(path, base / f)]
        if inner:
            errors.append(f"{where}.path = {entry['path']!r} is inside {inner[0]}/, which the workflow "
                          "writes; keep inputs elsewhere (e.g. data/)")
            continue
        if not os.path.lexists(path):
            errors.append(f"{where}.path = {entry['path']!r}: file not found")
            continue
        if fmt == "raw" and not ("shape" in entry and "dtype" in entry):
            errors.append(f"{where}: format raw needs shape and dtype")
            continue
        if fmt == "h5" and "dataset" not in entry:
            errors.append(f"{where}: format h5 needs dataset (the HDF5 dataset name)")
            continue
        if "dtype" in entry:
            try:
                dt = np.dtype(entry["dtype"])
                if dt.kind not in "biuf" or dt.itemsize == 0:
                    raise TypeError
            except TypeError:
                errors.append(f"{where}.dtype = {entry['dtype']!r}: not a NumPy dtype of real numbers "
                              "(e.g. uint16, <f4)")
                continue
        entry["path"] = str(path)
        try:
            vol = open_volume(entry, name, memory_budget=budget, inside=None if allow_outside else base)
        except VolumeError as exc:
            errors.append(str(exc).splitlines()[0])
            continue
        vol.close()  # the header is all this check reads
        entry["axes"], entry["spacing"] = vol.axes, vol.spacing
        entry["spacing_from"] = vol.source
        if vol.unit:
            entry["unit"] = vol.unit
        out[name] = entry
    return out, errors


def volume_entries(config: dict, base_dir=".", configfile=None) -> dict:
    """Normalised volume entries from ``config['volumes']`` and the optional sheet.

    Paths are resolved against ``base_dir``; a path that leaves the project is
    an error unless it is absolute and ``allow_outside_paths`` is true, and so
    is an input inside ``results/``, ``logs/`` or ``.snakemake/``.  Every file's
    header is checked (:func:`volsweep.io.readers.open_volume`, within
    ``ingest_buffer_mb``), so a damaged input stops the run before any job.
    Each entry gets its resolved ``axes`` (the file's axis order), ``spacing``
    (x, y, z), ``unit`` and ``spacing_from``.

    Raises
    ------
    ConfigError
        With one line per bad volume or sheet row.

    Examples
    --------
    >>> cfg = validate_config({"volumes": {"v": {"synthetic": {"shape": [4, 5, 6]}}},
    ...                        "thickness": {"enabled": False}}, announce=False)
    >>> volume_entries(cfg)["v"]["axes"]
    'xyz'
    """
    base = Path(base_dir).resolve()
    cached = _CACHE.pop(_fingerprint(config, base), None)  # checked a moment ago by validate_config
    if cached is not None:
        return cached
    entries, errors = _volume_entries(config, base, _Sources(configfile))
    if errors:
        raise ConfigError(errors)
    return entries


def _scan_errors(entries, config, blame) -> list[str]:
    """Small inputs (≤ SCAN_BYTES): a constant volume, or a phase that is empty or full, found now."""
    from volsweep.io.readers import open_volume, volume_where
    from volsweep.phase import PhaseError, check_phase, dtype_phase_problem

    th = config["thickness"]
    lines = []
    for name, entry in entries.items():
        where = f"volumes.{name}"
        if "synthetic" in entry:  # finite by construction; its phase is checked at ingest
            continue
        try:
            vol = open_volume(entry, name)
        except Exception:  # reported by the header checks
            continue
        with vol:
            numeric = th["threshold"] if not isinstance(th["threshold"], str) else None
            if th["enabled"] and (numeric is not None or th["label"] is not None):
                problem = dtype_phase_problem(vol.dtype, threshold=numeric, label=th["label"], invert=th["invert"])
                if problem:
                    key = "threshold" if numeric is not None else "label"
                    lines.append(f"{blame(['thickness', key])}: thickness.{key} = {th[key]!r} {problem} "
                                 f"({where} is {vol.dtype}; ingest keeps the raw values; otsu picks a "
                                 "threshold from the histogram)")
                    continue
            if vol.nbytes > SCAN_BYTES:
                continue
            try:
                lo, hi, bad = _scan(vol)
            except Exception as exc:  # a corrupt chunk: the reader's own error, on one line
                from volsweep.io.readers import quiet_abandoned_reads

                quiet_abandoned_reads()
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                lines.append(f"{volume_where(entry, name)}: cannot read the voxels: {type(exc).__name__}: {first}")
                continue
            if bad is not None:
                lines.append(f"{volume_where(entry, name)}: non-finite voxel {bad[0]} at index {bad[1]}")
                continue
            if lo == hi:
                lines.append(f"{volume_where(entry, name)}: every voxel is {lo:g}: a constant "
                             "volume has no structure to sweep or phase to measure")
                continue
            if th["enabled"]:
                try:
                    check_phase(vol, name, threshold=th["threshold"], label=th["label"], invert=th["invert"])
                except PhaseError as exc:
                    key = "threshold" if th["threshold"] is not None else "label"
                    lines.append(f"{blame(['thickness', key])}: thickness.{key} = {th[key]!r}: {exc}")
    return lines


def _scan(vol):
    """(min, max, first non-finite (value, index) or None) of a volume, block by block."""
    from volsweep.io.store import block_shape_for_budget
    from volsweep.tiling import plan_tiles

    lo, hi = math.inf, -math.inf
    block = block_shape_for_budget(vol.shape, vol.shape, 8, SCAN_BYTES)
    for tile in plan_tiles(vol.shape, block):
        data = np.asarray(vol[tile.core])
        finite = np.isfinite(data)
        if not finite.all():
            local = tuple(np.argwhere(~finite)[0])
            index = tuple(int(i + s.start) for i, s in zip(local, tile.core))
            return lo, hi, (data[local], index)
        lo, hi = min(lo, float(data.min())), max(hi, float(data.max()))
    return lo, hi, None


def _say(lines) -> None:
    for line in lines:
        print(f"volsweep: {line}", file=sys.stderr)


#: Old config keys (dotted) and their new names, kept for one release.
DEPRECATED_KEYS = {"memory_budget_mb": "ingest_buffer_mb", "sweep.memory_limit_mb": "device_memory_mb"}


def rename_deprecated(config: dict) -> list[tuple[str, str]]:
    """Move deprecated keys to their new names in place; the (old, new) pairs moved.

    Examples
    --------
    >>> cfg = {"memory_budget_mb": 64, "sweep": {"memory_limit_mb": None}}
    >>> rename_deprecated(cfg), cfg
    ([('memory_budget_mb', 'ingest_buffer_mb'), ('sweep.memory_limit_mb', 'device_memory_mb')], {'sweep': {}, 'ingest_buffer_mb': 64, 'device_memory_mb': None})
    """
    moved = []
    for old, new in DEPRECATED_KEYS.items():
        *parents, leaf = old.split(".")
        section = config
        for key in parents:
            section = section.get(key) if isinstance(section, dict) else None
        if isinstance(section, dict) and leaf in section:
            value = section.pop(leaf)
            config.setdefault(new, value)
            moved.append((old, new))
    return moved


def validate_config(config: dict, configfile=None, schema_path=SCHEMA_PATH, *, base_dir=".",
                    check_volumes=True, estimate=True, announce=True) -> dict:
    """Validate ``config`` in place, filling defaults; raise every mistake at once.

    Parameters
    ----------
    config : dict
        The loaded config (Snakemake's ``config``).
    configfile : str or list of str, optional
        The config file(s) it came from (comma-separated).  They are re-read
        strictly: a key given twice is a mistake, and a value that is not in
        them is blamed on ``--config``.
    schema_path : path
        The JSON schema (YAML).
    base_dir : path, keyword-only
        The project directory: volume paths are resolved against it.
    check_volumes : bool, keyword-only
        Check every volume's name, path and file header, and scan small
        inputs for a constant volume or an empty phase.
    estimate : bool, keyword-only
        Estimate every volume's jobs, kernel support, compute and memory
        (:mod:`volsweep.estimate`) and refuse what exceeds ``limits``.
    announce : bool, keyword-only
        Print the estimate and warnings to stderr, one line each.

    Raises
    ------
    ConfigError
        A :class:`SystemExit` whose lines name, for each mistake, the file,
        the key and the value.

    Examples
    --------
    >>> cfg = validate_config({"sweep": {"a": 2.0}, "volumes": {"v": {"synthetic": {"shape": [4, 4, 4]}}},
    ...                       "thickness": {"threshold": 0.5}}, check_volumes=False)
    >>> cfg["sweep"]["mode"]
    'reflect'
    >>> try:
    ...     validate_config({"sweep": {"a": float("nan"), "xi": [1, 1]}, "thickness": {"threshold": 0.5},
    ...                      "volumes": {"v": {"synthetic": {"shape": [4, 4, 4]}}}}, "my.yaml",
    ...                     check_volumes=False)
    ... except ConfigError as err:
    ...     print(err)
    my.yaml: sweep.a = nan: not a finite number
    my.yaml: sweep.xi = [1, 1]: [1, 1] has non-unique elements
    """
    blame = _Sources(configfile)
    lines = list(blame.errors)
    for old, new in rename_deprecated(config):
        if announce:
            print(f"volsweep: {blame(old.split('.'))}: {old} is deprecated and will be removed; "
                  f"use {new}", file=sys.stderr)
    lines += _schema_errors(config, blame, schema_path)
    storage = config.get("storage")
    if isinstance(storage, dict) and storage.get("chunks") is None and "shards" in storage:
        storage["chunks"] = storage["shards"]  # one chunk per shard
    lines += _semantic_errors(config, blame)  # each check skips what the schema found broken
    if check_volumes:
        base = Path(base_dir).resolve()
        try:
            entries, vol_errors = _volume_entries(config, base, blame)
        except (KeyError, TypeError, AttributeError):  # a volumes section the schema refused
            entries, vol_errors = {}, []
        lines += vol_errors
        if not lines:
            _CACHE[_fingerprint(config, base)] = copy.deepcopy(entries)
            estimates = []
            if estimate:
                estimates, est_lines = _estimate(entries, config, blame)
                lines += est_lines
            if not lines:
                lines += _scan_errors(entries, config, blame)
            if not lines and announce:
                _say(e.line() for e in estimates)
    lines = list(dict.fromkeys(lines))
    if lines:
        raise ConfigError(lines)
    return config


def _estimate(entries, config, blame):
    from volsweep.estimate import check_estimates, estimate_volume, log_estimates
    from volsweep.io.readers import source_shape

    estimates = []
    for name, entry in entries.items():
        shape = source_shape(entry, name)
        estimates.append(estimate_volume(name, shape, entry["spacing"], config))
    lines = check_estimates(estimates, config, blame(["sweep"]))
    if not lines:
        log_estimates(estimates)
    return estimates, lines
