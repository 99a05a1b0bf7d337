"""The mmtok command line: thin commands over the library."""
