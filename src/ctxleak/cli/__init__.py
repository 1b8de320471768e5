"""The command-line interface: a thin layer that parses flags, loads data, calls the library and
writes the run directory. Each subcommand lives in its own module with a ``register(app)``."""
