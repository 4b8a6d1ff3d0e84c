"""msgstore on Spark: a ``msgstore`` data source (batch and streaming) and the archive, stats
and verify jobs (``msgstore pipeline ...``). Needs the ``spark`` extra; nothing here imports
Spark until it is used, so the CLI stays light."""


def register(spark) -> None:
    """Make ``spark.read.format("msgstore")`` available in this session."""
    from .source import register as _register

    _register(spark)
