"""One exception hierarchy for the whole package; every message names the key or field at fault.

This module is the bottom layer: every other module may import it, it imports nothing of ours.
"""

from __future__ import annotations


class Zarr3Error(Exception):
    """Root of every error raised on purpose by zarr3_backend."""


# --- format: metadata, data types, codecs -------------------------------------------------------
class MetadataError(Zarr3Error, ValueError):
    """A zarr.json document (or a metadata argument) is invalid; the message names the field."""


class ZarrV2Error(MetadataError):
    """A write was asked of a node stored in the Zarr v2 format (``.zgroup``/``.zarray``): this
    package reads Zarr v2 but writes only Zarr v3."""


class UnknownFieldError(MetadataError):
    """A metadata field is not understood and is not marked ``"must_understand": false``."""


class DataTypeError(MetadataError):
    """Unknown or unsupported data type, or a fill value that does not fit it."""


class EncodedRangeError(DataTypeError):
    """CF-encoded values (packed with scale/offset, times in their units) fall outside the
    integer type they are stored as; writing them would wrap them around silently."""


class CodecError(Zarr3Error, ValueError):
    """A codec is misconfigured, a codec chain has the wrong form, or encoding failed."""


class UnknownCodecError(CodecError):
    """No codec is registered under the name found in the metadata."""


class CorruptionError(Zarr3Error, ValueError):
    """Stored bytes cannot be decoded: truncated chunk or shard, index out of range, bad frame."""


class ChecksumError(CorruptionError):
    """A stored checksum (crc32c) does not match the bytes it guards."""


# --- hierarchy ----------------------------------------------------------------------------------
class NodeNotFoundError(Zarr3Error, KeyError, FileNotFoundError):
    """No array or group at the given path (a ``FileNotFoundError`` too, as xarray's zarr engine
    and zarr-python raise for a missing store or node)."""

    def __str__(self) -> str:  # KeyError would repr() the message; keep it readable
        return str(self.args[0]) if self.args else ""


class ArrayNotFoundError(NodeNotFoundError):
    """No array at the given path."""


class ArrayGoneError(ArrayNotFoundError):
    """A write into a stored array (an append, a resize, an overwrite of the whole array) found it
    erased by another writer since it planned: nothing of it was written; ``to_zarr`` plans
    again without it (``core.node_claims.retry_shape_change``)."""


class GroupNotFoundError(NodeNotFoundError):
    """No group at the given path."""


class NodeExistsError(Zarr3Error, FileExistsError):
    """An array or group already exists where one was to be created (mode ``w-``)."""


class ReadOnlyError(Zarr3Error, PermissionError):
    """A write was attempted through a read-only store, array or group."""


# --- selections and shapes ----------------------------------------------------------------------
class SelectionError(Zarr3Error, IndexError):
    """A selection is out of bounds or of a kind the indexer does not support."""


class ShapeError(Zarr3Error, ValueError):
    """Shapes disagree: a value that cannot broadcast to a selection, chunks vs shards, ..."""


class ChunkAlignmentError(ShapeError):
    """Dask chunks would let two write tasks touch one shard (or chunk)."""


# --- arguments ----------------------------------------------------------------------------------
class ArgumentError(Zarr3Error, ValueError):
    """An argument of a public call is invalid (mode, encoding, region, ...); names it."""


class ArgumentTypeError(Zarr3Error, TypeError):
    """An argument of a public call has the wrong type; names it."""


# --- storage ------------------------------------------------------------------------------------
class StoreError(Zarr3Error, OSError):
    """The storage backend failed (unreachable endpoint, denied access, timeout); names the URL."""


class InvalidKeyError(Zarr3Error, ValueError):
    """A store key is malformed or would escape the store root."""


# --- writes that could not complete -------------------------------------------------------------
class InterruptedWriteError(Zarr3Error):
    """A node carries the in-flight marker of a write that has not committed (still running, or
    killed); its stored state may be part old, part new. The message names the write and the key;
    the next write, or ``zarr3_backend.repair``, finishes it."""


class WriteConflictError(Zarr3Error):
    """A conditional write lost to a concurrent writer more often than the retry budget allows, or
    a partial write was asked of a store that cannot make it safe against concurrent writers."""


class ShapeMovedError(WriteConflictError):
    """A write that changes an array's shape (an append, a resize) found the stored shape changed
    by another writer since it read it: nothing of it was written, and it is made again from the
    new shape (``core.commit.retry_shape_change``)."""


class NodeAddedError(WriteConflictError):
    """A write that adds a node (a variable new to its group, ``to_zarr(mode="a")``) found it
    created by another writer since it planned: nothing of it was written, and it is planned
    again over the stored node (``core.node_claims.retry_shape_change``)."""


class ResourceLimitError(CorruptionError):
    """Metadata or stored bytes ask for more than is sane or more than is stored (a huge chunk, an
    item count past the data, a byte range past the object); refused before allocating."""


# --- warnings -------------------------------------------------------------------------------------
class ConsolidationSkippedWarning(UserWarning):
    """A commit finished without consolidated metadata: a member stayed marked by another write
    in flight past ``commit_wait``. Readers list the members instead; the next write (or
    ``consolidate_metadata``) consolidates again."""
