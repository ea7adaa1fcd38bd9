"""The kit every tier is built from: the rules tiers share, in one place.

Nothing here knows about any one cloud and nothing imports an SDK. The built-in ``file://`` and
``memory://`` tiers, the first-party S3, GCS and Azure tiers and third-party tiers all use it,
so their names, keys, arguments and options are checked alike, their retries follow one policy
and their errors never leak secrets. One module per rule:

* :mod:`~silt.tierkit.names`: the name rule for URL paths and stored names
  (:func:`check_name`, :func:`check_path`, :func:`decode_path`), object keys
  (:func:`validate_key`) and key prefixes (:func:`normalize_prefix`);
* :mod:`~silt.tierkit.checks`: the arguments of the store methods (:func:`check_data`,
  :func:`check_range`, :func:`check_list_args`, :func:`check_keys`);
* :mod:`~silt.tierkit.urls`: any store URL's parts (:func:`split_url`),
  ``scheme://root/prefix`` URLs (:func:`parse_root_url`, :func:`check_root_name`), endpoints
  without secrets (:func:`check_endpoint`) and URLs as messages show them (:func:`public_url`);
* :mod:`~silt.tierkit.pathurls`: URLs rooted at a file on this host,
  ``scheme:///var/state.db/prefix`` (:func:`parse_path_url`, :func:`path_url`);
* :mod:`~silt.tierkit.options`: query options (:class:`TierOptions`, :func:`check_options`,
  ``parse_*``);
* :mod:`~silt.tierkit.leaks`: :func:`redact`, :func:`safe_cause`, :func:`chain_leaks`;
* :mod:`~silt.tierkit.status`: what an HTTP status means (:func:`classify_status`,
  :class:`StatusKind`) and the silt error for it (:func:`status_error`);
* :mod:`~silt.tierkit.retry`: the retry policy (:func:`whole_read`, :func:`retry_on`,
  :class:`BodyBrokenError`);
* :mod:`~silt.tierkit.base`: :class:`TierStore`, the part of an SDK-backed tier that is the
  same for every SDK (layout, ``from_url``, argument checks, error mapping, ``close``, pickling).
"""

from __future__ import annotations

from .base import TierStore
from .checks import check_data, check_keys, check_list_args, check_range
from .leaks import chain_leaks, redact, safe_cause
from .names import (
    MAX_NAME_BYTES,
    check_name,
    check_path,
    decode_path,
    name_problem,
    normalize_prefix,
    validate_key,
)
from .options import (
    NetworkOptions,
    TierOptions,
    check_options,
    parse_bool,
    parse_choice,
    parse_float,
    parse_int,
    parse_size,
)
from .pathurls import PathRoot, parse_path_url, path_url
from .retry import BodyBrokenError, retry_on, whole_read
from .status import STATUS_KINDS, StatusKind, classify_status, request_where, status_error
from .urls import (
    check_endpoint,
    check_root_name,
    parse_root_url,
    public_url,
    refuse_credentials_in_host,
    split_url,
)

__all__ = [
    "STATUS_KINDS",
    "StatusKind",
    "MAX_NAME_BYTES",
    "BodyBrokenError",
    "NetworkOptions",
    "PathRoot",
    "TierOptions",
    "TierStore",
    "chain_leaks",
    "check_data",
    "check_endpoint",
    "check_keys",
    "check_list_args",
    "check_name",
    "check_options",
    "check_path",
    "check_range",
    "classify_status",
    "check_root_name",
    "decode_path",
    "name_problem",
    "normalize_prefix",
    "parse_bool",
    "parse_choice",
    "parse_float",
    "parse_int",
    "parse_path_url",
    "parse_root_url",
    "parse_size",
    "path_url",
    "public_url",
    "redact",
    "refuse_credentials_in_host",
    "request_where",
    "retry_on",
    "safe_cause",
    "split_url",
    "status_error",
    "validate_key",
    "whole_read",
]

