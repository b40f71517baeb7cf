"""The format core: metadata, data types, chunk grid, chunk key encodings, Array and Group."""

from . import dtypes_text  # noqa: F401  (registers string / bytes / fixed_length_utf32 data types)
