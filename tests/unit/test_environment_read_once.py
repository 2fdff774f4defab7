"""functions/gcp/clients.py environment_read_once: a requests session reads the environment once, unless a proxy or
a .netrc asks requests to read it per call."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from functions.gcp.clients import environment_read_once

URL = "https://storage.googleapis.com"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in (*PROXY_VARIABLES, "NO_PROXY", "no_proxy", "NETRC", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_no_proxy_no_netrc_reads_once_and_keeps_the_ca_bundle(bare_environment: pytest.MonkeyPatch) -> None:
    bare_environment.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/landfall-ca.pem")
    session = requests.Session()
    assert environment_read_once(session, URL)
    assert session.trust_env is False
    assert session.verify == "/etc/ssl/landfall-ca.pem"


def test_a_proxy_leaves_requests_reading_it_per_call(bare_environment: pytest.MonkeyPatch) -> None:
    bare_environment.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    session = requests.Session()
    assert not environment_read_once(session, URL)
    assert session.trust_env is True
    assert session.verify is True


def test_a_proxy_that_no_proxy_excludes_is_read_once(bare_environment: pytest.MonkeyPatch) -> None:
    bare_environment.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    bare_environment.setenv("NO_PROXY", "storage.googleapis.com")
    session = requests.Session()
    assert environment_read_once(session, URL)
    assert session.trust_env is False


def test_a_netrc_leaves_requests_reading_it_per_call(bare_environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".netrc").write_text("machine storage.googleapis.com login a password b\n")
    session = requests.Session()
    assert not environment_read_once(session, URL)
    assert session.trust_env is True
