"""The format core: metadata, data types, chunk grid, chunk key encodings, Array and Group."""
