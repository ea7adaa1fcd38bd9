"""Duration arguments read as Spark reads them: what Spark accepts is accepted with Spark's
value, silt's own older abbreviations still work, and errors name the argument
(silt_spark.runtime._interval)."""

from __future__ import annotations

import datetime

import pytest
import silt_spark
from py4j.java_gateway import get_field
from pyspark.sql import functions as F
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt_spark.errors import TimeModeError
from silt_spark.runtime._interval import duration_ms, parse_interval

ACCEPTED = [
    "10 minutes", "10 minute", "interval 10 minutes", "INTERVAL 10 MINUTES", "2 weeks",
    "1 week", "1 hour 30 minutes", "1.5 seconds", "0.001 seconds", "500 milliseconds",
    "3 days", "36 hours", " 10  Seconds ", "+10 seconds", "1 hour -10 minutes",
    "1 second 500 milliseconds", "10 microseconds", "1 month", "2 years 1 day",
]
#: Refused by Spark, accepted by silt as before Spark's syntax was: (text, microseconds).
SILT_ONLY = [
    ("10 mins", 600_000_000), ("10 min", 600_000_000), ("10 secs", 10_000_000),
    ("10 sec", 10_000_000), ("10 s", 10_000_000), ("500 ms", 500_000), ("2 hrs", 7_200_000_000),
    ("2 h", 7_200_000_000), ("1 d", 86_400_000_000), ("1.5 hours", 5_400_000_000),
]
REFUSED = [
    "10s", "10", "", "interval", "ten seconds", "10 seconds and more", "1 nanosecond",
    "seconds", "10 minuets", "1.5 months",
]


def spark_interval(spark, text: str) -> tuple[int, int]:
    """``(months, microseconds)`` of Spark's own parser (``IntervalUtils.stringToInterval``)."""
    jvm = spark._jvm
    ci = jvm.org.apache.spark.sql.catalyst.util.IntervalUtils.stringToInterval(
        jvm.org.apache.spark.unsafe.types.UTF8String.fromString(text)
    )
    days = get_field(ci, "days")
    return get_field(ci, "months"), days * 86_400_000_000 + get_field(ci, "microseconds")


def spark_accepts(spark, text: str) -> bool:
    df = spark.range(1).select(F.current_timestamp().alias("ts"))
    try:
        df.withWatermark("ts", text)
    except Exception:
        return False
    return True


def test_the_strings_spark_accepts_with_spark_values(spark):
    for text in ACCEPTED:
        assert spark_accepts(spark, text), text
        assert parse_interval(text) == spark_interval(spark, text), text
    assert parse_interval("interval '10' minute") == (0, 600_000_000)
    assert spark_accepts(spark, "interval '10' minute")
    for text, micros in SILT_ONLY:
        assert not spark_accepts(spark, text), text
        assert parse_interval(text) == (0, micros), text
    for text in REFUSED:
        assert not spark_accepts(spark, text), text
        with pytest.raises(ValueError):
            parse_interval(text)


def test_duration_arguments_take_ints_timedeltas_and_strings():
    def w(value):
        return duration_ms(value, "w", positive=True, months_ok=False)

    def d(value):
        return duration_ms(value, "d", positive=False, months_ok=True)

    assert w("interval 2 weeks") == 14 * 86_400_000
    assert w(datetime.timedelta(minutes=10)) == 600_000
    assert w(1500) == 1500
    assert w("1.5 seconds") == 1500
    assert d("0 seconds") == 0
    assert d("1 month") == 31 * 86_400_000
    assert d("10 microseconds") == 0  # truncated, as Spark
    with pytest.raises(InvalidArgumentError, match="w must be a whole number of milliseconds"):
        w("1.0005 seconds")
    with pytest.raises(InvalidArgumentError, match="w: '1 month' has months or years"):
        w("1 month")
    with pytest.raises(InvalidArgumentError, match="w must be positive"):
        w(datetime.timedelta(0))
    with pytest.raises(InvalidArgumentError, match="d must not be negative"):
        d("1 hour -2 hours")
    with pytest.raises(InvalidArgumentError, match="d must be a finite interval"):
        d("inf seconds")
    with pytest.raises(InvalidArgumentError, match="w must be at most 9223372036854775 ms"):
        w("1e300 days")
    with pytest.raises(InvalidTypeError, match=r"w must be ms, a timedelta or an interval"):
        w(1.5)
    with pytest.raises(InvalidTypeError, match="d must be ms or an interval string, got True"):
        d(True)


def test_every_duration_argument_names_itself(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    stream = spark.readStream.schema("user string, amount long, ts timestamp").parquet(str(src))
    n = iter(range(100))

    def url():
        return (tmp_path / f"s{next(n)}").as_uri()

    def window(**kw):
        args = dict(window_duration="10 minutes", aggs=["count"])
        args.update(kw)
        return silt_spark.window_aggregate(stream, "user", "ts", state_url=url(), num_shards=2,
                                           **args)

    for name in ("window_duration", "slide_duration", "watermark_delay"):
        with pytest.raises(InvalidArgumentError, match=f"^{name}: cannot parse interval '10 mi'"):
            window(**{name: "10 mi"})
    window(window_duration="interval 1 hour", slide_duration=datetime.timedelta(minutes=30),
           watermark_delay="2 weeks")
    with pytest.raises(InvalidArgumentError, match=r"^watermark_delay: cannot parse interval"):
        silt_spark.deduplicate(stream, "user", url(), 2, event_time_column="ts",
                               watermark_delay="5 seconds ago")
    with pytest.raises(InvalidArgumentError, match=r"^ttl must be positive"):
        silt_spark.deduplicate(stream, "user", url(), 2, ttl="0 seconds")
    with pytest.raises(ValueError, match="not both"):
        silt_spark.deduplicate(stream, "user", url(), 2, event_time_column="ts", ttl="1 hour")
    with pytest.raises(InvalidArgumentError, match=r"^watermark_delay must not be negative"):
        silt_spark.transform_with_state(
            stream, silt_spark.StatefulProcessor(), "user", "user string", url(), 2,
            time_mode="eventtime", event_time_column="ts", watermark_delay="-1 minute",
        )


def test_a_state_ttl_is_refused_in_event_time_mode():
    from silt_spark.operators.processor._handle import StatefulProcessorHandle

    handle = StatefulProcessorHandle(task=None, time_mode="eventtime")
    for make in (lambda: handle.getValueState("v", "n long", 1000),
                 lambda: handle.getListState("l", "n long", 1000),
                 lambda: handle.getMapState("m", "k string", "n long", 1000)):
        with pytest.raises(TimeModeError, match=r"time_mode='eventtime'.*PySpark refuses"):
            make()
    handle.getValueState("v", "n long")  # without a TTL: fine
    StatefulProcessorHandle(task=None, time_mode="processingtime").getValueState("t", None, 10)
