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
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
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


# --- URLs rooted at a path -----------------------------------------------------------------

DB = (".db", ".sqlite", ".sqlite3")


def _path_url(url: str) -> tuple[str, str, dict[str, str]]:
    return tuple(tierkit.parse_path_url(url, ("kit",), suffixes=DB,  # type: ignore[return-value]
                                        example="kit:///var/state.db/prefix"))


@pytest.mark.parametrize(
    ("url", "path", "prefix", "options"),
    [
        ("kit:///var/state.db", "/var/state.db", "", {}),
        ("kit:///var/state.db/", "/var/state.db", "", {}),
        ("kit:///var/state.db/jobs/clicks", "/var/state.db", "jobs/clicks/", {}),
        ("KIT://localhost/var/a%20b.sqlite3/p/?x=1", "/var/a b.sqlite3", "p/", {"x": "1"}),
        ("kit:///a.db/b.db/c", "/a.db", "b.db/c/", {}),  # the first segment with a suffix
        ("kit:///var/state.dbx/s.sqlite/k", "/var/state.dbx/s.sqlite", "k/", {}),
        ("kit:///x%2Fy.db/k", "/x/y.db", "k/", {}),  # decoded, then split
    ],
)
def test_path_urls_split_at_the_first_segment_with_a_suffix(
        url: str, path: str, prefix: str, options: dict[str, str]) -> None:
    assert _path_url(url) == (path, prefix, options)


@pytest.mark.parametrize(
    ("url", "text"),
    [
        ("kit:///var/state", "names no file ending in .db or .sqlite or .sqlite3"),
        ("kit:///var/.db", "names no file ending"),  # a suffix alone is no file name
        ("kit://", "names no path"),
        ("kit://host/var/state.db", "names the host 'host'"),
        ("kit://var/state.db", "names the host 'var' (or a relative path)"),
        ("kit://u:hunter22@host/var/state.db", "holds credentials"),
        ("kit:///var/../state.db", "segment '..' is refused"),
        ("kit:///var/state.db/a/%2e%2e/b", "segment '..' is refused"),
        ("kit:///var//state.db", "segment '' is refused"),
        ("other:///var/state.db", "opens kit:// URLs"),
    ],
)
def test_bad_path_urls_are_refused_without_credentials(url: str, text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(text)) as info:
        _path_url(url)
    assert "hunter22" not in str(info.value)


def test_path_url_refuses_what_would_not_read_back() -> None:
    assert tierkit.path_url("kit", "/var/a b?#%.db", "jobs/", suffixes=DB) == (
        "kit:///var/a%20b%3F%23%25.db/jobs")
    assert tierkit.path_url("kit", "/var/state.db", suffixes=DB) == "kit:///var/state.db"
    for path, text in [("var/state.db", "must be absolute"),
                       ("/var/state", "does not end in .db"),
                       ("/data/old.db/new.db", "the directory 'old.db' on the way"),
                       ("/var/../x.db", "'..'")]:
        with pytest.raises(InvalidArgumentError, match=re.escape(text)):
            tierkit.path_url("kit", path, suffixes=DB)
    with pytest.raises(InvalidArgumentError, match="file name endings"):
        tierkit.path_url("kit", "/var/state.db", suffixes=("db",))


_SEGMENT = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")),
                   min_size=1, max_size=12).filter(lambda s: tierkit.name_problem(s) is None)


@given(dirs=st.lists(_SEGMENT, max_size=3), stem=_SEGMENT, suffix=st.sampled_from(DB),
       prefix=st.lists(_SEGMENT, max_size=3))
def test_path_url_and_parse_path_url_round_trip(
        dirs: list[str], stem: str, suffix: str, prefix: list[str]) -> None:
    """Any path and prefix that path_url accepts read back the same, whatever the characters
    (spaces, '?', '#', '%', non-ASCII)."""
    path = "/" + "/".join([*dirs, stem + suffix])
    try:
        url = tierkit.path_url("kit", path, "/".join(prefix), suffixes=DB)
    except InvalidArgumentError:
        # Refused only when a name on the way already ends in a suffix.
        assert any(s.endswith(DB) for s in [*dirs, stem + suffix][:-1]) or "/" in stem
        return
    assert "?" not in url and "#" not in url
    expected_prefix = "/".join(prefix) + "/" if prefix else ""
    assert _path_url(url) == (path, expected_prefix, {})


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


# --- what a tier author reads ------------------------------------------------------------------


@pytest.mark.parametrize("attribute", ["url", "local", "coalesce_reads", "shared_across"])
def test_store_attributes_are_documented_where_authors_look(attribute: str) -> None:
    """Each attribute a tier sets is explained by ``help(ObjectStore)`` (not only in a ``#:``
    comment, which pydoc does not show) and in docs/plugins.md's table."""
    import pydoc

    from silt.store import ObjectStore

    shown = pydoc.render_doc(ObjectStore, renderer=pydoc.plaintext)
    explained = re.search(rf"``{attribute}`` \(\w+(, default [^)]*)?\)\n[ |]+\w{{3,}}", shown)
    assert explained, f"help(ObjectStore) does not explain {attribute}"
    assert hasattr(ObjectStore, attribute)
    docs = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert f"| `{attribute}` |" in docs


# --- what an HTTP status means (tierkit.status) ------------------------------------------------

#: How the three tiers read statuses before they shared one table: the same set, copied three
#: times, plus "any 5xx". The shared table must say exactly this about what is transient.
_OLD_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})


@pytest.mark.parametrize("status", [None, True, False, -1, 0, 99, 100, 199, 600, 999, 10**6])
def test_a_status_outside_http_is_unknown(status: object) -> None:
    kind = tierkit.classify_status(status)  # type: ignore[arg-type]
    assert kind is tierkit.StatusKind.UNKNOWN and not kind.transient


@given(st.integers(min_value=200, max_value=599))
def test_every_http_status_has_one_meaning(status: int) -> None:
    kind = tierkit.classify_status(status)
    assert kind.transient == (status in _OLD_TRANSIENT or status >= 500)
    assert (kind is tierkit.StatusKind.THROTTLED) == (status == 429)
    assert (kind is tierkit.StatusKind.AUTH) == (status in (401, 403))
    assert (kind is tierkit.StatusKind.NOT_FOUND) == (status == 404)
    assert (kind is tierkit.StatusKind.PRECONDITION) == (status in (304, 412))
    assert (kind is tierkit.StatusKind.CONFLICT) == (status == 409)
    assert (kind is tierkit.StatusKind.RANGE) == (status == 416)
    if status not in tierkit.STATUS_KINDS:
        expected = {2: "OK", 3: "REDIRECT", 4: "CLIENT", 5: "TRANSIENT"}[status // 100]
        assert kind is tierkit.StatusKind[expected]


def test_the_status_table_cannot_be_changed_by_a_caller() -> None:
    with pytest.raises(TypeError):
        tierkit.STATUS_KINDS[404] = tierkit.StatusKind.CLIENT  # type: ignore[index]
    assert tierkit.classify_status(404) is tierkit.StatusKind.NOT_FOUND


@pytest.mark.parametrize("kind", list(tierkit.StatusKind))
@pytest.mark.parametrize("retried", [True, False])
def test_status_error_gives_each_meaning_its_silt_error(
    kind: tierkit.StatusKind, retried: bool
) -> None:
    from silt.errors import NotFoundError, StoreError

    where = tierkit.request_where("read", "k", "x://b/p")
    assert where == "read 'k' in x://b/p"
    assert tierkit.request_where("list", None, "x://b/p") == "list x://b/p"
    error = tierkit.status_error(
        kind, service="X", where=where, detail="503: busy", key="k", url="x://b/p",
        endpoint="http://h", access_hint="check the key", retried=retried,
    )
    text = str(error)
    if kind is tierkit.StatusKind.NOT_FOUND:
        assert type(error) is NotFoundError and text == "object 'k' does not exist in x://b/p"
    elif kind is tierkit.StatusKind.AUTH:
        assert type(error) is StoreError
        assert text == "read 'k' in x://b/p: access denied (503: busy) at http://h; check the key"
    elif kind.transient:
        assert type(error) is (RetriesExhaustedError if retried else TransientStoreError)
        assert text == "read 'k' in x://b/p: temporary X failure (503: busy) at http://h"
    else:
        assert type(error) is StoreError
        assert text == "read 'k' in x://b/p: X request failed (503: busy) at http://h"


@pytest.mark.parametrize(
    "copy",
    [
        "TRANSIENT_STATUS",  # the set of transient statuses: tierkit.STATUS_KINDS
        "({408, 429",  # the same set written out
        "status >= 500",  # "any 5xx": tierkit.classify_status
        "status in (401, 403)",  # access denied: StatusKind.AUTH
        'f"{action} {key!r} in {url}"',  # tierkit.request_where
        "temporary S3 failure", "temporary GCS failure", "temporary Azure failure",
    ],
)
def test_no_tier_keeps_its_own_reading_of_statuses(copy: str) -> None:
    copies = [p.relative_to(ROOT) for p in TIER_SOURCES if copy in p.read_text(encoding="utf-8")]
    assert not copies, f"{copy!r} is written again in {copies}; use silt.tierkit.status"


def test_split_url_lives_with_the_other_url_rules() -> None:
    """``split_url`` moved from silt.store to silt.tierkit.urls (the kit builds on the store
    contract, never the other way round); the old import path still works."""
    from silt import store
    from silt.store import split_url
    from silt.tierkit import urls

    assert split_url is urls.split_url is tierkit.split_url
    assert "tierkit" not in "".join(sorted(_imports(Path(store.__file__))))
    assert "store" not in "".join(sorted(_imports(Path(urls.__file__))))
    assert split_url("S3://b/p?x=1&y=") == ("s3", "b/p", {"x": "1", "y": ""})
    with pytest.raises(InvalidArgumentError, match="is not a store URL"):
        split_url("no-scheme")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        store.nope  # noqa: B018
