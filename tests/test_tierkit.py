"""silt.tierkit: the rules every tier shares, each in one place, and the one retry policy.

* the argument checks of the store methods, options parsing and root URLs behave the same for
  every tier (each tier's own suite checks them through its store as well);
* the retry policy: ``silt.store.retrying`` (the engine's loop) never retries a
  ``RetriesExhaustedError`` (a failure the tier already retried), and tierkit's own loop ends in
  one; tests/test_engine_on_tiers.py counts the requests on each tier's emulator;
* the layering: tierkit imports no tier, and no tier re-implements a rule tierkit owns.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from silt import tierkit
from silt.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    RetriesExhaustedError,
    TransientStoreError,
)
from silt.store import ENGINE_ATTEMPTS, retrying

ROOT = Path(__file__).resolve().parents[1]
TIERKIT = ROOT / "packages/core/src/silt/tierkit"
TIER_SOURCES = [
    *sorted((ROOT / "packages/core/src/silt/tiers").glob("*.py")),
    *sorted(ROOT.glob("packages/tier-*/src/*/*.py")),
    *sorted(ROOT.glob("packages/_template/src/*/*.py")),
]


# --- argument checks ------------------------------------------------------------------------


def test_list_arguments() -> None:
    assert tierkit.check_list_args("a/", None) == ("a/", None)
    assert tierkit.check_list_args("", "a/b") == ("", "a/b")
    with pytest.raises(InvalidTypeError, match="list prefix must be a str"):
        tierkit.check_list_args(b"a", None)
    with pytest.raises(InvalidTypeError, match="start_after must be a str or None"):
        tierkit.check_list_args("", 3)


def test_delete_keys_are_all_checked_first_and_deduplicated() -> None:
    def locate(key: str) -> str:
        return "p/" + tierkit.validate_key(key)

    assert tierkit.check_keys(iter(["a", "b", "a"]), locate) == ["p/a", "p/b"]
    for single in ("a", b"a"):
        with pytest.raises(InvalidTypeError, match="not a single key"):
            tierkit.check_keys(single, locate)
    with pytest.raises(InvalidTypeError):
        tierkit.check_keys(3, locate)
    with pytest.raises(InvalidArgumentError, match=r"'\.\.' segment"):
        tierkit.check_keys(["ok", "a/../b"], locate)


# --- options and URLs -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Options(tierkit.TierOptions):
    SCHEME = "kit"
    SIZES = {"chunk": 16}  # noqa: RUF012 - read-only by convention, as in the tiers
    CHOICES = {"mode": ("fast", "safe")}  # noqa: RUF012
    CREDENTIAL_OPTIONS = frozenset({"secret_key"})
    CREDENTIAL_HINT = "Use the environment."

    endpoint: str | None = None
    anonymous: bool | None = None
    chunk: int = 1024
    mode: str = "safe"
    attempts: int = 5
    timeout: float = 2.5


def test_options_parse_by_field_and_round_trip() -> None:
    query = {"endpoint": " http://h:1 ", "anonymous": "yes", "chunk": "1KiB", "mode": "FAST",
             "attempts": "2", "timeout": "0.5"}
    options = _Options.from_query("kit://b/p", query)
    assert options == _Options("http://h:1", True, 1024, "fast", 2, 0.5)
    assert _Options.from_query("kit://b", options.to_query()) == options
    assert _Options().to_query() == {}


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ({"speed": "1"}, "unknown option.*accepts: anonymous, attempts, chunk"),
        ({"secret_key": "hunter22"}, "look like credentials.*Use the environment"),
        ({"chunk": "8"}, "at least 16 bytes"),
        ({"mode": "slow"}, "one of fast, safe"),
        ({"attempts": "0"}, "must be >= 1"),
        ({"timeout": "nan"}, "must be >= 0.001"),
        ({"anonymous": "maybe"}, "true or false"),
        ({"endpoint": " "}, "is empty"),
    ],
)
def test_bad_options_are_refused_without_their_values(query: dict[str, str], text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=text) as info:
        _Options.from_query("kit://b/p?secret_key=hunter22", query)
    assert "hunter22" not in str(info.value)


def _bucket(name: str, url: str) -> str:
    return tierkit.check_root_name(name, url, what="bucket", example="kit://bucket/prefix",
                                   rule="plain names only", advice="Use the environment.")


def test_root_urls() -> None:
    parse = lambda url: tierkit.parse_root_url(  # noqa: E731
        url, ("kit",), check_root=_bucket, example="kit://bucket/prefix")
    assert parse("kit://b") == ("b", "", {})
    assert parse("kit://b/a%20b/c/?x=1") == ("b", "a b/c/", {"x": "1"})
    for url, text in [
        ("kit://", "no bucket named"),
        ("kit://u:hunter22@b/p", "must not contain '@'"),
        ("kit://b c/p", "bucket name 'b c'.*plain names only"),
        ("kit://b/a/../c", "not a plain"),
        ("kit://b/%252e%252e", "not a plain"),
        ("other://b/p", "opens kit:// URLs"),
    ]:
        with pytest.raises(InvalidArgumentError, match=text) as info:
            parse(url)
        assert "hunter22" not in str(info.value)


# --- the retry policy -----------------------------------------------------------------------


def test_the_engine_never_retries_what_the_tier_already_retried() -> None:
    calls = []

    def exhausted() -> None:
        calls.append(1)
        raise RetriesExhaustedError("read 'k': temporary failure after the SDK's 5 tries")

    with pytest.raises(RetriesExhaustedError):
        retrying(exhausted, sleep=lambda _s: None)
    assert len(calls) == 1

    def transient() -> None:
        calls.append(1)
        raise TransientStoreError("nobody retried this yet")

    calls.clear()
    with pytest.raises(TransientStoreError):
        retrying(transient, sleep=lambda _s: None)
    assert len(calls) == ENGINE_ATTEMPTS


def test_whole_read_retries_broken_bodies_and_then_gives_up() -> None:
    calls = []

    def broken() -> bytes:
        calls.append(1)
        raise tierkit.BodyBrokenError("read 'k': got 3 of 9 bytes")

    with pytest.raises(RetriesExhaustedError, match=r"got 3 of 9 bytes \(gave up after 3 tries\)"
                       ) as info:
        retrying(lambda: tierkit.whole_read(broken, attempts=3, timeout=5.0),
                 sleep=lambda _s: None)
    assert len(calls) == 3  # the whole-read loop's tries, not multiplied by the engine's
    assert isinstance(info.value.__cause__, tierkit.BodyBrokenError)

    answers = iter([tierkit.BodyBrokenError("cut"), b"data"])

    def flaky() -> bytes:
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert tierkit.whole_read(flaky, attempts=2, timeout=5.0) == b"data"
    with pytest.raises(TransientStoreError, match="other"):  # other errors pass at once
        tierkit.retry_on(KeyError, lambda: (_ for _ in ()).throw(TransientStoreError("other")),
                         attempts=3, deadline=1.0)


# --- one place for each rule ----------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_tierkit_imports_no_tier() -> None:
    for path in TIERKIT.glob("*.py"):
        for module in _imports(path):
            assert "tiers" not in module and "silt_" not in module, (path.name, module)


@pytest.mark.parametrize(
    "rule",
    [
        "list prefix must be a str",  # tierkit.check_list_args
        "not a single key",  # tierkit.check_keys
        "def normalize_prefix",  # tierkit.normalize_prefix
        "class BodyBrokenError",  # tierkit.BodyBrokenError
        "def __reduce__",  # tierkit.TierStore
        "def from_query",  # tierkit.TierOptions
        "get_range start must",  # tierkit.check_range
    ],
)
def test_no_tier_reimplements_a_shared_rule(rule: str) -> None:
    assert TIER_SOURCES
    copies = [p.relative_to(ROOT) for p in TIER_SOURCES if rule in p.read_text(encoding="utf-8")]
    assert not copies, f"{rule!r} is written again in {copies}; use silt.tierkit"
