"""Reader and writer of the tiertrain tensor file format (``.ttf``).

The format is specified in ``docs/FORMATS.md``. In short, a file is::

    magic "TTTENSR1" | u64 header_bytes | u32 header_crc32 | u32 reserved (0)
    JSON header (UTF-8) | zero padding up to a multiple of 64
    data section: each tensor's raw little-endian C-order bytes at a 64-byte aligned offset
    trailer: magic "TTEND001" | u64 total file size

The writer stores the tensors in the order of the dict it is given and puts the
trailer right after the last tensor's bytes. It writes atomically: temporary
file in the same directory, ``fsync``, ``os.replace`` over the final name, then
``fsync`` of the directory.

The reader checks the magic, the trailer (magic and file size), the header CRC,
the header's structure and every tensor's CRC, and raises ``ValueError`` naming
the first thing that does not match.

Supported dtypes: ``f32``, ``f64``, ``i32`` and ``u8`` are written and read as
the matching numpy dtypes. ``bf16`` is only read (files written by the C++
side), and is widened losslessly to ``float32``.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib

import numpy as np

MAGIC = b"TTTENSR1"
TRAILER_MAGIC = b"TTEND001"
FORMAT_NAME = "tiertrain-tensors"
FORMAT_VERSION = 1
ALIGN = 64

_PREAMBLE = struct.Struct("<8sQII")  # magic, header_bytes, header_crc32, reserved
_TRAILER = struct.Struct("<8sQ")  # trailer magic, total file size

# numpy (kind, itemsize) -> .ttf dtype name, for the dtypes the writer accepts.
_WRITE_DTYPES = {("f", 4): "f32", ("f", 8): "f64", ("i", 4): "i32", ("u", 1): "u8"}
# .ttf dtype name -> little-endian numpy dtype of the stored bytes.
_READ_DTYPES = {
    "f32": np.dtype("<f4"),
    "f64": np.dtype("<f8"),
    "bf16": np.dtype("<u2"),
    "i32": np.dtype("<i4"),
    "u8": np.dtype("u1"),
}


def _align(n: int) -> int:
    """Round ``n`` up to the next multiple of ``ALIGN``."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _to_storable(name: str, value) -> tuple[str, np.ndarray]:
    """Return the .ttf dtype name and a little-endian C-contiguous copy-or-view of ``value``."""
    arr = np.asarray(value)
    key = (arr.dtype.kind, arr.dtype.itemsize)
    if key not in _WRITE_DTYPES:
        raise ValueError(
            f"tensor {name!r}: dtype {arr.dtype} is not supported (use float32, float64, int32 or uint8)"
        )
    dtype_name = _WRITE_DTYPES[key]
    return dtype_name, np.asarray(arr, dtype=_READ_DTYPES[dtype_name], order="C")


def _raw_bytes(arr: np.ndarray) -> np.ndarray:
    """View a C-contiguous array (0-d and empty ones included) as a flat uint8 array, without copying."""
    return arr.reshape(-1).view(np.uint8)


def _fsync_dir(directory: str) -> None:
    """``fsync`` a directory so that a rename inside it is durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: str | os.PathLike, tensors: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``tensors`` (in insertion order) and the JSON-serialisable ``meta`` to ``path`` atomically.

    Arrays of dtype float32, float64, int32 and uint8 are accepted (any byte
    order; they are stored little-endian, row-major). Numpy scalars and 0-d
    arrays are stored with shape ``[]``.
    """
    path = os.fspath(path)
    entries = []
    arrays = []
    offset = 0
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor name must be a non-empty string, got {name!r}")
        dtype_name, arr = _to_storable(name, value)
        crc = zlib.crc32(_raw_bytes(arr))
        entries.append(
            {
                "name": name,
                "dtype": dtype_name,
                "shape": list(arr.shape),
                "offset": offset,
                "bytes": arr.nbytes,
                "crc32": crc,
            }
        )
        arrays.append(arr)
        offset = _align(offset + arr.nbytes)

    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "meta": meta, "tensors": entries}
    header_bytes = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    data_start = _align(_PREAMBLE.size + len(header_bytes))
    data_end = data_start + (entries[-1]["offset"] + entries[-1]["bytes"] if entries else 0)
    total_size = data_end + _TRAILER.size

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp_path = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_PREAMBLE.pack(MAGIC, len(header_bytes), zlib.crc32(header_bytes), 0))
            f.write(header_bytes)
            f.write(b"\0" * (data_start - _PREAMBLE.size - len(header_bytes)))
            for entry, arr in zip(entries, arrays):
                f.write(b"\0" * (data_start + entry["offset"] - f.tell()))
                f.write(_raw_bytes(arr))
            f.write(_TRAILER.pack(TRAILER_MAGIC, total_size))
            if f.tell() != total_size:
                raise RuntimeError(f"internal error: wrote {f.tell()} bytes, expected {total_size}")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise
    _fsync_dir(directory)


def _check_entry(path: str, index: int, entry, data_len: int) -> tuple[str, str, list[int], int, int, int]:
    """Validate one tensor entry of the header; return (name, dtype, shape, offset, bytes, crc32)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: header tensor #{index} is not an object")
    missing = [k for k in ("name", "dtype", "shape", "offset", "bytes", "crc32") if k not in entry]
    if missing:
        raise ValueError(f"{path}: header tensor #{index} lacks field(s) {', '.join(missing)}")
    name, dtype_name, shape = entry["name"], entry["dtype"], entry["shape"]
    offset, nbytes, crc = entry["offset"], entry["bytes"], entry["crc32"]
    if dtype_name not in _READ_DTYPES:
        raise ValueError(f"{path}: tensor {name!r} has unknown dtype {dtype_name!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"{path}: tensor {name!r} has invalid shape {shape!r}")
    if not all(isinstance(v, int) and v >= 0 for v in (offset, nbytes, crc)):
        raise ValueError(f"{path}: tensor {name!r} has a non-integer or negative offset, bytes or crc32")
    expected = int(np.prod(shape, dtype=np.int64)) * _READ_DTYPES[dtype_name].itemsize
    if nbytes != expected:
        raise ValueError(f"{path}: tensor {name!r} has bytes={nbytes}, but shape {shape} of {dtype_name} needs {expected}")
    if offset % ALIGN:
        raise ValueError(f"{path}: tensor {name!r} offset {offset} is not a multiple of {ALIGN}")
    if offset + nbytes > data_len:
        raise ValueError(
            f"{path}: tensor {name!r} (offset {offset}, {nbytes} bytes) runs past the data section ({data_len} bytes)"
        )
    return name, dtype_name, shape, offset, nbytes, crc


def read(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read and fully validate a .ttf file; return ``(tensors, meta)``.

    ``tensors`` keeps the file's order; each array is a writable, native
    byte-order copy (``bf16`` tensors are widened to ``float32``). Raises
    ``ValueError`` naming the first check that fails.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        blob = f.read()
    size = len(blob)
    if size < _PREAMBLE.size + _TRAILER.size:
        raise ValueError(f"{path}: file too small ({size} bytes) to be a tensor file")
    magic, header_len, header_crc, _reserved = _PREAMBLE.unpack_from(blob, 0)
    if magic != MAGIC:
        raise ValueError(f"{path}: bad magic {magic!r}, expected {MAGIC!r}")
    trailer_magic, trailer_size = _TRAILER.unpack_from(blob, size - _TRAILER.size)
    if trailer_magic != TRAILER_MAGIC:
        raise ValueError(f"{path}: bad trailer magic {trailer_magic!r} (file truncated or corrupt)")
    if trailer_size != size:
        raise ValueError(f"{path}: file size {size} does not match the trailer's {trailer_size} (truncated?)")
    data_start = _align(_PREAMBLE.size + header_len)
    data_end = size - _TRAILER.size
    if data_start > data_end:
        raise ValueError(f"{path}: header length {header_len} runs past the end of the file")
    header_bytes = blob[_PREAMBLE.size : _PREAMBLE.size + header_len]
    actual_crc = zlib.crc32(header_bytes)
    if actual_crc != header_crc:
        raise ValueError(f"{path}: header CRC mismatch (stored {header_crc:#010x}, computed {actual_crc:#010x})")
    try:
        header = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not valid UTF-8 JSON: {e}") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise ValueError(f"{path}: header format is not {FORMAT_NAME!r}")
    if header.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported version {header.get('version')!r}, expected {FORMAT_VERSION}")
    entries = header.get("tensors")
    meta = header.get("meta", {})
    if not isinstance(entries, list) or not isinstance(meta, dict):
        raise ValueError(f"{path}: header 'tensors' must be a list and 'meta' an object")

    tensors: dict[str, np.ndarray] = {}
    for index, entry in enumerate(entries):
        name, dtype_name, shape, offset, nbytes, crc = _check_entry(path, index, entry, data_end - data_start)
        if name in tensors:
            raise ValueError(f"{path}: tensor name {name!r} appears twice")
        raw = blob[data_start + offset : data_start + offset + nbytes]
        actual = zlib.crc32(raw)
        if actual != crc:
            raise ValueError(f"{path}: tensor {name!r} CRC mismatch (stored {crc:#010x}, computed {actual:#010x})")
        arr = np.frombuffer(raw, dtype=_READ_DTYPES[dtype_name]).reshape(tuple(shape))
        if dtype_name == "bf16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = arr.astype(arr.dtype.newbyteorder("="), copy=True)
    return tensors, meta
