"""Workflow configuration: schema validation with defaults, semantic checks, volumes.

Every error is a :class:`ConfigError` whose one-line message names the config
file, the key and the value, raised before any job runs.
"""

from __future__ import annotations

import copy
import csv
import math
from pathlib import Path

import jsonschema
import numpy as np
import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"
FORMATS = ("npy", "tif", "zarr", "h5", "raw")
MB = 2**20
SHEET_COLUMNS = ("name", "path", "format", "dataset", "shape", "dtype", "offset", "spacing", "unit")


class ConfigError(ValueError):
    """A configuration or volume-sheet error; the message names file, key and value."""


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


def validate_config(config: dict, configfile="config.yaml", schema_path=SCHEMA_PATH) -> dict:
    """Validate ``config`` in place against the JSON schema, filling defaults.

    Raises
    ------
    ConfigError
        On an unknown key, a wrong type or an out-of-range value.

    Examples
    --------
    >>> cfg = validate_config({"sweep": {"a": 2.0}})
    >>> cfg["sweep"]["mode"]
    'reflect'
    """
    validator = _validator_with_defaults(load_schema(schema_path))
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.path), list(map(str, e.path))))
    if errors:
        err = jsonschema.exceptions.best_match(errors) or errors[0]
        where = _key_path(err.absolute_path)
        if err.validator == "additionalProperties":
            known = set(err.schema.get("properties", {}))
            unknown = sorted(set(err.instance) - known)
            raise ConfigError(f"{configfile}: unknown key {where + '.' if err.absolute_path else ''}"
                              f"{unknown[0]} (allowed: {', '.join(sorted(known))})")
        raise ConfigError(f"{configfile}: {where} = {err.instance!r}: {err.message}")
    check_config(config, configfile)
    return config


def angle_values(grid: dict) -> np.ndarray:
    """Angles in radians of a grid spec: ``{"num": n}`` gives ``k*pi/n``; ``{"values": [...]}``.

    Examples
    --------
    >>> angle_values({"num": 4})
    array([0.        , 0.78539816, 1.57079633, 2.35619449])
    """
    if "values" in grid:
        return np.asarray(grid["values"], dtype=np.float64)
    return np.arange(grid["num"], dtype=np.float64) * (math.pi / grid["num"])


def check_config(config: dict, configfile="config.yaml") -> None:
    """Checks the schema cannot express; raises :class:`ConfigError`."""
    chunks, shards = config["storage"]["chunks"], config["storage"]["shards"]
    if any(s % c for c, s in zip(chunks, shards)):
        raise ConfigError(f"{configfile}: storage.chunks = {chunks} must divide storage.shards = {shards}")
    sweep = config["sweep"]
    for name in ("theta", "phi"):
        values = angle_values(sweep[name])
        if not np.all(np.isfinite(values)):
            raise ConfigError(f"{configfile}: sweep.{name}.values = {sweep[name]['values']} must be finite")
    th = config["thickness"]
    if th["threshold"] is not None and th["label"] is not None:
        raise ConfigError(f"{configfile}: thickness.threshold = {th['threshold']} and thickness.label = "
                          f"{th['label']}: set only one of them")
    if th["enabled"] and th["threshold"] is None and th["label"] is None:
        raise ConfigError(f"{configfile}: thickness: set thickness.threshold or thickness.label "
                          "to select the phase")
    if any(c % s for c, s in zip(th["chunk"], shards)):
        raise ConfigError(f"{configfile}: thickness.chunk = {th['chunk']} must be a multiple of "
                          f"storage.shards = {shards} (concurrent writers must not share a shard)")
    bins = th["bins"]
    if isinstance(bins, list) and np.any(np.diff(bins) <= 0):
        raise ConfigError(f"{configfile}: thickness.bins = {bins} must be strictly increasing")
    if not config["volumes"] and not config.get("volume_sheet"):
        raise ConfigError(f"{configfile}: volumes = {{}}: give at least one volume or a volume_sheet")


def _parse_triple(text: str, kind, where: str) -> list:
    parts = [p for p in str(text).replace("x", ",").replace(" ", ",").split(",") if p]
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{where} = {text!r}: expected three numbers like 1,1,1") from None
    if len(values) != 3:
        raise ConfigError(f"{where} = {text!r}: expected three numbers like 1,1,1")
    return values


def read_volume_sheet(path: Path) -> dict:
    """Volumes from a TSV sheet with a header row (see :data:`SHEET_COLUMNS`)."""
    if not path.is_file():
        raise ConfigError(f"volume_sheet = {str(path)!r}: file not found")
    volumes = {}
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        unknown = set(reader.fieldnames or ()) - set(SHEET_COLUMNS)
        if unknown or "name" not in (reader.fieldnames or ()):
            raise ConfigError(f"{path}: columns {reader.fieldnames} (unknown {sorted(unknown)}); "
                              f"allowed: {', '.join(SHEET_COLUMNS)}, with 'name' required")
        for line, row in enumerate(reader, start=2):
            name = (row.pop("name") or "").strip()
            where = f"{path}:{line}"
            if not name:
                raise ConfigError(f"{where}: name is empty")
            if name in volumes:
                raise ConfigError(f"{where}: name = {name!r} appears twice")
            entry = {k: v.strip() for k, v in row.items() if v and v.strip()}
            for key in ("shape", "spacing"):
                if key in entry:
                    entry[key] = _parse_triple(entry[key], int if key == "shape" else float,
                                               f"{where}: {key}")
            if "offset" in entry:
                entry["offset"] = int(entry["offset"])
            volumes[name] = entry
    return volumes


def volume_entries(config: dict, base_dir=".", configfile="config.yaml") -> dict:
    """Normalised volume entries from ``config['volumes']`` and the optional sheet.

    Paths are resolved against ``base_dir``; a path that leaves the project is
    an error unless it is absolute and ``allow_outside_paths`` is true.  Every
    file's header is checked (:func:`volsweep.io.readers.open_volume`, within
    ``memory_budget_mb``), so a damaged input stops the run before any job.
    """
    from volsweep.io.readers import DEFAULT_MEMORY_BUDGET, open_volume

    base = Path(base_dir).resolve()
    volumes = {name: dict(entry) for name, entry in config["volumes"].items()}
    sources = {name: configfile for name in volumes}
    if config.get("volume_sheet"):
        sheet = base / config["volume_sheet"]
        for name, entry in read_volume_sheet(sheet).items():
            if name in volumes:
                raise ConfigError(f"{sheet}: volume {name!r} is also defined in {configfile}")
            # The sheet goes through the same schema as inline entries.
            schema = load_schema()
            validator = _validator_with_defaults({"$schema": schema["$schema"],
                                                  "definitions": schema["definitions"],
                                                  "$ref": "#/definitions/volume"})
            for err in validator.iter_errors(entry):
                raise ConfigError(f"{sheet}: volume {name!r}: {_key_path(err.absolute_path)} = "
                                  f"{err.instance!r}: {err.message}")
            volumes[name], sources[name] = entry, str(sheet)
    out = {}
    for name, entry in volumes.items():
        where = f"{sources[name]}: volumes.{name}"
        entry.setdefault("spacing", [1.0, 1.0, 1.0])
        if "synthetic" in entry:
            out[name] = entry
            continue
        fmt = "tif" if entry["format"] == "tiff" else entry["format"]
        entry["format"] = fmt
        raw_path = Path(entry["path"])
        path = (raw_path if raw_path.is_absolute() else base / raw_path).resolve()
        outside = base not in path.parents and path != base
        if outside and not (raw_path.is_absolute() and config.get("allow_outside_paths")):
            raise ConfigError(f"{where}.path = {entry['path']!r} leaves the project directory "
                              f"{base}; use an absolute path and allow_outside_paths: true")
        if not path.exists():
            raise ConfigError(f"{where}.path = {entry['path']!r}: file not found")
        if fmt == "raw" and not ("shape" in entry and "dtype" in entry):
            raise ConfigError(f"{where}: format raw needs shape and dtype")
        if fmt == "h5" and "dataset" not in entry:
            raise ConfigError(f"{where}: format h5 needs dataset (the HDF5 dataset name)")
        if "dtype" in entry:
            try:
                np.dtype(entry["dtype"])
            except TypeError:
                raise ConfigError(f"{where}.dtype = {entry['dtype']!r}: not a NumPy dtype") from None
        entry["path"] = str(path)
        budget = config.get("memory_budget_mb")
        open_volume(entry, name, memory_budget=DEFAULT_MEMORY_BUDGET if budget is None else budget * MB)
        out[name] = entry
    return out


def sweep_blocks(config: dict) -> list[np.ndarray]:
    """Theta indices of each sweep job (a block covers all phi and xi)."""
    n = len(angle_values(config["sweep"]["theta"]))
    size = config["sweep"]["block_size"]
    return [np.arange(i, min(n, i + size)) for i in range(0, n, size)]
