"""A secret in a store URL is never shown: not in an error, a store's repr or str, nor the CLI.

URLs end up in messages and logs, so a ``user:password@`` in the host part and option values in
the query are never echoed (:func:`silt.tierkit.public_url`), and a credential in the host part
of a built-in tier's URL is refused before anything else is said about the URL. These tests plant
a secret in every such place, for every built-in scheme (and for schemes no installed tier
provides), and look for it in every message, repr and CLI output.
"""

from __future__ import annotations

import uuid

import pytest
import silt
from silt.cli import main
from silt.errors import SiltError

SECRET = "Pw7Secret"


def _urls(tmp_path) -> list[str]:
    path = f"{tmp_path}/db"
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    urls = []
    for host in (f"user:{SECRET}@localhost", f"user:{SECRET}@", f"{SECRET}@localhost",
                 f"user:{SECRET}@{ns}", f"{SECRET}@{ns}", f"user:{SECRET}@h:1", f":{SECRET}@x"):
        for scheme in ("file", "memory", "FILE", "s3", "gs", "az", "nosuch"):
            for tail in (path, f"{path}/%2e%2e/x", f"{ns}/x", "", "/", f"{path}?o=1"):
                urls.append(f"{scheme}://{host}/{tail.lstrip('/')}")
    for scheme in ("file", "memory"):
        where = path if scheme == "file" else ns
        urls += [f"{scheme}:///{where}?token={SECRET}", f"{scheme}:///{where}?a=1&sig={SECRET}",
                 f"{scheme}:///{where}#{SECRET}", f"{scheme}:///{where}?x={SECRET}#{SECRET}",
                 f"{scheme}://{where}?sig={SECRET}"]
    urls += [f"user:{SECRET}@localhost/x", f"//user:{SECRET}@localhost/x"]
    return urls


def test_the_api_never_shows_a_secret_planted_in_a_url(tmp_path) -> None:
    """silt.open and silt.open_store either refuse the URL with silt's own error, whose message
    holds no secret, or open a store whose repr, str and URL hold none."""
    (tmp_path / "db").mkdir()
    seen = 0
    for url in _urls(tmp_path):
        for opener in (silt.open, silt.open_store):
            try:
                handle = opener(url)
            except SiltError as exc:
                assert SECRET not in str(exc) and SECRET not in repr(exc), (url, str(exc))
                seen += 1
                continue
            try:
                store = handle.store if isinstance(handle, silt.DB) else handle
                for text in (repr(handle), str(handle), repr(store), str(store),
                             str(getattr(store, "url", ""))):
                    assert SECRET not in text, (url, text)
            finally:
                handle.close()
    assert seen > 200  # most are refused


@pytest.mark.parametrize("command", [
    ["ls"], ["ls", "--json"], ["inspect"], ["get", "k"], ["scan"], ["verify"], ["verify", "--all"],
    ["compact", "--policy", "tiered"], ["gc"], ["checkpoint", "c1"],
])
def test_the_cli_never_shows_a_secret_planted_in_a_url(tmp_path, capsys, command) -> None:
    (tmp_path / "db").mkdir()
    for url in _urls(tmp_path):
        argv = [command[0], url, *command[1:]]
        try:
            main(argv)
        except SystemExit:
            pass
        out, err = capsys.readouterr()
        assert SECRET not in out + err, (argv, out + err)
        assert "Traceback" not in out + err and "is a bug" not in out + err, (argv, out + err)
