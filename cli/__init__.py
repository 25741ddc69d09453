"""The ``qkv`` command line, one module per command group, each thin: parse the options,
call the packages (mostly :mod:`wiring`), print. ``cli.app:app`` is the entry point."""
