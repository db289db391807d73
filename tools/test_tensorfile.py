"""Self-test of tools/tensorfile.py: round trip, layout invariants, truncation and corruption detection.

Run with ``python3 -m pytest tools/test_tensorfile.py``.
"""

import json
import struct

import numpy as np
import pytest

import tensorfile


def _sample():
    """A few tensors covering every writable dtype, a scalar, an empty tensor, a big-endian and a
    non-contiguous input."""
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((5, 7)).astype(np.float32),
        "x64": rng.standard_normal(3),
        "tokens": rng.integers(0, 256, (2, 3)).astype(np.int32),
        "bytes": np.frombuffer(b"hello", dtype=np.uint8),
        "loss": np.float32(1.25),
        "empty": np.zeros((0, 4), np.float32),
        "big_endian": np.arange(4, dtype=">i4"),
        "transposed": rng.standard_normal((3, 4)).astype(np.float32).T,
    }
    meta = {"step": 3, "name": "gpt", "nested": {"lr": 1e-3, "text": "é"}}
    return tensors, meta


def _write_sample(tmp_path):
    """Write the sample tensors to a file under ``tmp_path`` and return its path."""
    path = tmp_path / "sample.ttf"
    tensors, meta = _sample()
    tensorfile.write(path, tensors, meta)
    return path


def test_round_trip(tmp_path):
    path = _write_sample(tmp_path)
    tensors, meta = _sample()
    got, got_meta = tensorfile.read(path)
    assert got_meta == meta
    assert list(got) == list(tensors)
    for name, expected in tensors.items():
        expected = np.asarray(expected)
        assert got[name].shape == expected.shape, name
        assert got[name].dtype == expected.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(got[name], expected)
    assert not list(tmp_path.glob(".*.tmp")), "temporary file left behind"


def test_layout(tmp_path):
    path = _write_sample(tmp_path)
    blob = path.read_bytes()
    assert blob[:8] == tensorfile.MAGIC
    assert blob[-16:-8] == tensorfile.TRAILER_MAGIC
    assert struct.unpack("<Q", blob[-8:])[0] == len(blob)
    header_len = struct.unpack_from("<Q", blob, 8)[0]
    data_start = (24 + header_len + 63) // 64 * 64
    assert not any(blob[24 + header_len : data_start]), "header padding must be zero"
    tensors, _ = _sample()
    entries = json.loads(blob[24 : 24 + header_len])["tensors"]
    assert [e["name"] for e in entries] == list(tensors)
    for entry in entries:
        assert entry["offset"] % 64 == 0
        start = data_start + entry["offset"]
        expected = np.asarray(tensors[entry["name"]])
        assert blob[start : start + entry["bytes"]] == expected.astype(expected.dtype.newbyteorder("<")).tobytes()


def test_truncated_file_is_detected(tmp_path):
    path = _write_sample(tmp_path)
    blob = path.read_bytes()
    path.write_bytes(blob[:-1])
    with pytest.raises(ValueError, match="trailer|size"):
        tensorfile.read(path)
    path.write_bytes(blob[:-100] + blob[-16:])  # plausible trailer but wrong size
    with pytest.raises(ValueError, match="size"):
        tensorfile.read(path)


@pytest.mark.parametrize("where", ["header", "data"])
def test_flipped_byte_is_detected(tmp_path, where):
    path = _write_sample(tmp_path)
    blob = bytearray(path.read_bytes())
    header_len = struct.unpack_from("<Q", blob, 8)[0]
    data_start = (24 + header_len + 63) // 64 * 64
    pos = 24 + header_len // 2 if where == "header" else data_start + 3  # inside tensor "w"
    blob[pos] ^= 0x01
    path.write_bytes(bytes(blob))
    expected = "header CRC" if where == "header" else "tensor 'w' CRC"
    with pytest.raises(ValueError, match=expected):
        tensorfile.read(path)


def test_bad_magic_and_dtype(tmp_path):
    path = _write_sample(tmp_path)
    blob = bytearray(path.read_bytes())
    blob[0:1] = b"X"
    path.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="magic"):
        tensorfile.read(path)
    with pytest.raises(ValueError, match="not supported"):
        tensorfile.write(tmp_path / "bad.ttf", {"h": np.zeros(2, np.float16)}, {})
    assert not (tmp_path / "bad.ttf").exists()
