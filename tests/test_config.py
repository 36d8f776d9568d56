"""Config validation: defaults filled, bad values rejected by name, volumes normalised."""

import copy

import numpy as np
import pytest
import yaml

from volsweep.config import ConfigError, angle_values, read_volume_sheet, validate_config, volume_entries
from volsweep.jobs import theta_blocks

DEMO = yaml.safe_load(open("config.yaml"))


def demo():
    return copy.deepcopy(DEMO)


def test_demo_config_is_valid_and_defaults_are_filled():
    cfg = {"volumes": {"v": {"synthetic": {"shape": [15, 16, 17], "pores": [{"radius": 3}]}}},
           "thickness": {"threshold": 0.5}}
    validate_config(cfg)
    assert cfg["sweep"]["mode"] == "reflect"
    assert cfg["storage"]["shards"] == [128, 128, 128]
    assert cfg["volumes"]["v"]["synthetic"]["seed"] == 0
    validate_config(demo())


@pytest.mark.parametrize("storage, chunks", [
    ({}, [128, 128, 128]),  # one chunk per shard
    ({"shards": [64, 32, 96]}, [64, 32, 96]),  # follows the shards given
    ({"chunks": [32, 32, 32]}, [32, 32, 32]),
    ({"chunks": None, "shards": [32, 32, 64]}, [32, 32, 64]),
])
def test_storage_chunks_default_to_the_shards(storage, chunks):
    cfg = {"volumes": {"v": {"synthetic": {"shape": [15, 16, 17]}}}, "thickness": {"threshold": 0.5},
           "storage": storage}
    validate_config(cfg, check_volumes=False, announce=False)
    assert cfg["storage"]["chunks"] == chunks


@pytest.mark.parametrize("patch, words", [
    (lambda c: c.update(bogus=1), ["unknown key", "bogus"]),
    (lambda c: c["sweep"].update(colour="red"), ["unknown key", "sweep.colour"]),
    (lambda c: c["sweep"].update(a=0), ["sweep.a", "0"]),
    (lambda c: c["sweep"].update(a=-1.5), ["sweep.a", "-1.5"]),
    (lambda c: c["sweep"].update(xi=[1.0, 0.0]), ["sweep.xi[1]", "0.0"]),
    (lambda c: c["sweep"].update(xi=[]), ["sweep.xi", "[]"]),
    (lambda c: c["sweep"].update(a="big"), ["sweep.a", "'big'"]),
    (lambda c: c["sweep"].update(mode="nearest"), ["sweep.mode", "nearest"]),
    (lambda c: c["sweep"].update(theta={"num": 0}), ["sweep.theta.num", "0"]),
    (lambda c: c["sweep"].update(stats=["energy", "kurtosis"]), ["sweep.stats[1]", "kurtosis"]),
    (lambda c: c["volumes"]["demo"].update(spacing=[1, -1, 1]), ["volumes.demo.spacing[1]", "-1"]),
    (lambda c: c["storage"].update(chunks=[24, 16, 16]), ["storage.chunks", "[24, 16, 16]", "divide"]),
    (lambda c: c["storage"].update(chunks=[0, 16, 16]), ["storage.chunks[0]", "0", "minimum"]),
    (lambda c: c["storage"].update(chunks="big"), ["storage.chunks", "big", "array"]),
    (lambda c: c["thickness"].update(chunk=[48, 32, 32]), ["thickness.chunk", "[48, 32, 32]"]),
    (lambda c: c["thickness"].update(label=2), ["thickness.label", "2", "only one"]),
    (lambda c: c["thickness"].update(bins=[0, 3, 2]), ["thickness.bins"]),
    (lambda c: c.update(device="tpu"), ["device", "tpu"]),
    (lambda c: c.update(volumes={}), ["volumes"]),
])
def test_bad_config_is_rejected_by_name(patch, words):
    cfg = demo()
    patch(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, configfile="my.yaml")
    msg = str(err.value)
    assert msg.startswith("my.yaml: ") and "\n" not in msg and err.value.lines == [msg]
    for word in words:
        assert word in msg, msg


def test_angle_grid_and_blocks():
    assert np.allclose(angle_values({"num": 4}), [0, np.pi / 4, np.pi / 2, 3 * np.pi / 4])
    assert np.allclose(angle_values({"values": [0.1, 2.0]}), [0.1, 2.0])
    cfg = validate_config(demo())
    cfg["sweep"]["theta"] = {"num": 10}
    cfg["sweep"]["block_size"] = 4
    n_theta = len(angle_values(cfg["sweep"]["theta"]))
    blocks = theta_blocks(n_theta, 0.0, job_minutes=30, block_size=cfg["sweep"]["block_size"])
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_volume_paths(tmp_path):
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "a.npy", np.zeros((2, 3, 4)))
    cfg = validate_config({"volumes": {"a": {"path": "data/a.npy", "format": "npy"}},
                           "thickness": {"threshold": 0.5}}, check_volumes=False)
    entries = volume_entries(cfg, base_dir=tmp_path)
    assert entries["a"]["path"] == str(tmp_path / "data" / "a.npy")
    assert entries["a"]["spacing"] == [1.0, 1.0, 1.0]

    cfg["volumes"] = {"b": {"path": "data/missing.npy", "format": "npy"}}
    with pytest.raises(ConfigError, match="volumes.b.path = 'data/missing.npy': file not found"):
        volume_entries(cfg, base_dir=tmp_path)
    cfg["volumes"] = {"c": {"path": "../a.npy", "format": "npy"}}
    with pytest.raises(ConfigError, match=r"volumes.c.path = '../a.npy' leaves the project"):
        volume_entries(cfg, base_dir=tmp_path / "data")
    outside = tmp_path / "data" / "a.npy"
    cfg["volumes"] = {"d": {"path": str(outside), "format": "npy"}}
    with pytest.raises(ConfigError, match="allow_outside_paths"):
        volume_entries(cfg, base_dir=tmp_path / "sub")
    cfg["allow_outside_paths"] = True
    assert volume_entries(cfg, base_dir=tmp_path / "sub")["d"]["path"] == str(outside)
    cfg["volumes"] = {"e": {"path": "data/a.npy", "format": "raw"}}
    with pytest.raises(ConfigError, match="volumes.e: format raw needs shape and dtype"):
        volume_entries(cfg, base_dir=tmp_path)
    cfg["volumes"] = {"f": {"path": "data/a.npy", "format": "h5"}}
    with pytest.raises(ConfigError, match="volumes.f: format h5 needs dataset"):
        volume_entries(cfg, base_dir=tmp_path)


def test_volume_sheet(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 3, 4)))
    (tmp_path / "raw.bin").write_bytes(bytes(2 * 3 * 4 * 2))
    sheet = tmp_path / "volumes.tsv"
    sheet.write_text("name\tpath\tformat\tshape\tdtype\tspacing\n"
                     "a\ta.npy\tnpy\t\t\t1,2,3\n"
                     "r\traw.bin\traw\t2x3x4\tuint16\t\n")
    vols = read_volume_sheet(sheet)
    assert vols["a"]["spacing"] == [1.0, 2.0, 3.0]
    assert vols["r"]["shape"] == [2, 3, 4]
    cfg = validate_config({"volume_sheet": "volumes.tsv", "thickness": {"threshold": 0.5}},
                          check_volumes=False)
    entries = volume_entries(cfg, base_dir=tmp_path)
    assert sorted(entries) == ["a", "r"] and entries["r"]["dtype"] == "uint16"

    sheet.write_text("name\tpath\tformat\tspacing\na\ta.npy\tnpy\t1,0,1\n")
    with pytest.raises(ConfigError, match=r"volumes.tsv:2: volumes.a.spacing\[1\] = 0.0"):
        volume_entries(cfg, base_dir=tmp_path)
    sheet.write_text("name\tpath\tcolour\na\ta.npy\tred\n")
    with pytest.raises(ConfigError, match="unknown"):
        volume_entries(cfg, base_dir=tmp_path)
    sheet.write_text("name\tpath\tformat\na\ta.npy\tnpy\na\ta.npy\tnpy\n")
    with pytest.raises(ConfigError, match="volumes.tsv:3: name = 'a' appears twice .first as 'a' on line 2"):
        volume_entries(cfg, base_dir=tmp_path)


def test_deprecated_memory_keys_move_to_their_new_names(capsys):
    from volsweep.config import validate_config

    cfg = {"memory_budget_mb": 64, "sweep": {"memory_limit_mb": 900.0},
           "thickness": {"threshold": 0.5}, "volumes": {"v": {"synthetic": {"shape": [4, 4, 4]}}}}
    out = validate_config(cfg, "old.yaml", check_volumes=False)
    assert out["ingest_buffer_mb"] == 64 and out["device_memory_mb"] == 900.0
    assert "memory_limit_mb" not in out["sweep"] and "memory_budget_mb" not in out
    err = capsys.readouterr().err
    assert "memory_budget_mb is deprecated and will be removed; use ingest_buffer_mb" in err
    assert "sweep.memory_limit_mb is deprecated and will be removed; use device_memory_mb" in err
