"""Each remote tier's default connection pool holds what the engine's defaults put in flight at
once: a cold read's wave (``Settings.read_parallelism`` GETs on the read pool and one on the
calling thread) beside ``Settings.upload_parallelism`` SST uploads, each with the tier's parts or
blocks of one object at once. A request beyond the pool opens a connection of its own and
closes it after (a new TCP and TLS handshake per request on a real store)."""

from __future__ import annotations

import silt
from silt_azure import AzureOptions
from silt_gcs import GcsOptions
from silt_s3 import S3Options


def _engine_in_flight(parts_per_upload: int) -> int:
    s = silt.Settings()
    return s.read_parallelism + 1 + s.upload_parallelism * parts_per_upload


def test_s3s_pool_holds_a_read_wave_beside_multipart_uploads() -> None:
    o = S3Options()
    assert o.max_pool_connections >= _engine_in_flight(o.multipart_concurrency)


def test_gcss_pool_holds_a_read_wave_beside_the_uploads() -> None:
    # a GCS upload is one request at a time (a resumable upload sends its chunks in order)
    assert GcsOptions().max_pool_connections >= _engine_in_flight(1)


def test_azures_pool_holds_a_read_wave_beside_block_uploads() -> None:
    o = AzureOptions()
    assert o.max_connections >= _engine_in_flight(o.upload_concurrency)
