"""The console's rules against other web sites (``console._origin``): the
names it answers under, and what a request that changes something must be."""

from __future__ import annotations

import pytest

from logstrand.console._origin import change_refusal, host_name, host_refusal

NAMES = frozenset({"console.corp.example", "10.0.0.5"})


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:8080", "localhost"),
        ("Console.Corp.Example", "console.corp.example"),
        ("[::1]:8080", "::1"),
        ("::1", "::1"),
        ("127.0.0.1", "127.0.0.1"),
    ],
)
def test_the_name_in_a_host_header(header: str, name: str) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    "header",
    ["localhost", "localhost:1", "127.0.0.1:8080", "[::1]:9", "10.1.2.3", "console.corp.example."],
)
def test_addresses_localhost_and_its_own_names_are_served(header: str) -> None:
    assert host_refusal(header, NAMES) is None


@pytest.mark.parametrize(
    "header", [None, "evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil"]
)
def test_any_other_name_is_refused(header: str | None) -> None:
    assert host_refusal(header, NAMES) is not None


JSON = {"content-type": "application/json; charset=utf-8", "host": "127.0.0.1:8080"}


def test_reads_are_not_changes() -> None:
    assert change_refusal("GET", {"origin": "http://evil.example"}, "http") is None


def test_a_change_must_be_json_from_the_console_s_own_origin() -> None:
    assert change_refusal("POST", JSON, "http") is None  # a tool: no Origin
    assert change_refusal("POST", {**JSON, "origin": "http://127.0.0.1:8080"}, "http") is None
    assert change_refusal("PATCH", {**JSON, "content-type": "text/plain"}, "http") == (
        415,
        "a request that changes something must be Content-Type: application/json",
    )
    assert change_refusal("POST", {"host": "127.0.0.1:8080"}, "http") is not None
    for origin in ("http://evil.example", "null", "https://127.0.0.1:8080", "http://127.0.0.1:9"):
        refused = change_refusal("POST", {**JSON, "origin": origin}, "http")
        assert refused is not None
        assert refused[0] == 403
    same_site = {**JSON, "sec-fetch-site": "same-site"}
    assert change_refusal("POST", same_site, "http") is not None
