"""A SparkSession for the jobs: local by default, quiet, loopback-only, with the source registered."""

from __future__ import annotations

import os
import tempfile

LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = off
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def quiet_conf_dir() -> str:
    """A SPARK_CONF_DIR holding a log4j2.properties that keeps Spark's chatter off stderr."""
    directory = os.path.join(tempfile.gettempdir(), "msgstore-spark-conf")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "log4j2.properties")
    if not os.path.exists(path):  # (written whole, then renamed: two sessions may start at once)
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False) as f:
            f.write(LOG4J)
        os.replace(f.name, path)
    return directory


def spark_session(master: str | None = None, app: str = "msgstore", extra: dict[str, str] | None = None, test_jvm: bool = False):
    os.environ.setdefault("SPARK_CONF_DIR", quiet_conf_dir())
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or __import__("sys").executable)
    local = master is None or master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app).master(master or "local[*]")
    conf = {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "4"}
    if local:
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    if test_jvm:  # faster start-up, slower heavy jobs: for tests only
        opts = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        conf.update({"spark.driver.extraJavaOptions": opts, "spark.executor.extraJavaOptions": opts, "spark.sql.shuffle.partitions": "2"})
    conf.update(extra or {})
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    from .source import register

    register(spark)
    return spark
