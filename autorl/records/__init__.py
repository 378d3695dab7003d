"""The sweep's record store (SQLite) and the files built from it, such as ``results.csv``."""
