"""The .om container: ge.proto schema, attribute mapping, and the binary file (see README.md)."""
