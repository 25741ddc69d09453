"""The documentation site's machinery (MkDocs, ``make docs``): reference pages generated from
the code (the app's OpenAPI document, the typer app, the settings class), the benchmark
page generated from ``bench/results``, and the fenced examples that the test suite runs.
Nothing here is imported by the service."""
