"""Config layers as TOML text, JSON text or plain dicts of the same shape, and the `check`
command. Wrong shapes are in test_validation.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from turnstile_scheduler import ConfigError, DiagnosticCode, Layer, Policy, TurnstileError
from turnstile_scheduler._json_layer import dumps

GITHUB = {
    "conversation": {
        "tools": {
            "github_issues": {"concurrency": {"key": "github", "limit": 4}, "source": "mcp"},
            "github_pulls": {"concurrency": {"key": "github", "limit": 4}},
            "fs_delete_file": {"concurrency": 1, "fan_out": {"on_error": "stop"}},
            "weird name": {"concurrency": 2},
        }
    },
    "providers": {"anthropic": {"model": "x", "params": [1, 2.5, True, "q\"uote"]}},
}


def test_a_dict_layer_crosses_as_json_as_a_person_writes_it() -> None:
    import json

    text = dumps(GITHUB, "layer")
    assert '"github_issues": {\n        "concurrency": { "key": "github", "limit": 4 },\n        "source": "mcp"\n' in text
    assert '"params": [1, 2.5, true, "q\\"uote"]' in text
    assert json.loads(text) == GITHUB


def test_dict_and_text_layers_resolve_alike() -> None:
    from_dict = Policy.resolve([Layer("user", GITHUB)])
    from_text = Policy.resolve([("user", dumps(GITHUB, "layer"))])
    assert from_dict.tools() == from_text.tools()
    assert from_dict.fingerprint() == from_text.fingerprint()
    assert from_dict.tool("github_pulls").concurrency[0].limit == 4


def test_layers_mix_text_and_dicts_in_precedence_order() -> None:
    p = Policy.resolve(
        [
            ("defaults", "[conversation.tools.t]\nconcurrency = { key = \"k\", limit = 2 }\n"),
            ("user", {"conversation": {"tools": {"t": {"concurrency": {"limit": 8}}}}}),
        ]
    )
    [c] = p.tool("t").concurrency
    assert (c.key, c.limit) == ("k", 8)


def test_max_wait_resolves_to_max_wait_ms_and_tools_naming_a_key_agree_on_it() -> None:
    tools = {"slow": {"concurrency": {"key": "slow", "max_wait": "10m"}}, "strict": {"concurrency": {"key": "strict", "max_wait": 0}}, "plain": {"concurrency": 1}}
    p = Policy.resolve([("user", {"conversation": {"tools": tools}})])
    assert [p.tool(n).concurrency[0].max_wait_ms for n in ("slow", "strict", "plain")] == [600_000, 0, 300_000]
    assert p.tool("unset").concurrency == ()
    conflict = {"a": {"concurrency": {"key": "k", "max_wait": "10m"}}, "b": {"concurrency": {"key": "k"}}}
    with pytest.raises(ConfigError) as e:
        Policy.resolve([("user", {"conversation": {"tools": conflict}})])
    [d] = e.value.diagnostics
    assert (d.code, d.tools) == (DiagnosticCode.CONCURRENCY_MAX_WAIT_CONFLICT, ["a", "b"])


def test_diagnostics_of_a_dict_layer_name_key_paths_tools_and_the_lines_of_its_json() -> None:
    bad = {"conversation": {"tools": {"a": {"concurrency": {"key": "g", "limit": 4}}, "b": {"concurrency": {"key": "g", "limit": 2}}, "c": {"concurrency": "2"}}}}
    with pytest.raises(ConfigError) as e:
        Policy.resolve([("plugin", bad)])
    assert isinstance(e.value, TurnstileError) and e.value.code == "invalid-config"
    by_code = {d.code: d for d in e.value.diagnostics}
    conflict = by_code["concurrency-limit-conflict"]
    assert conflict.tools == ["a", "b"] and conflict.path == ["conversation", "tools"]
    assert conflict.labels[0].span.layer_name == "plugin"
    # The JSON the dict crossed as, one field a line: the labels point at its lines.
    assert '"limit": 4' in conflict.rendered and '"limit": 2' in conflict.rendered
    assert conflict.labels[0].span.line > 1
    assert by_code["concurrency-type"].path == ["conversation", "tools", "c", "concurrency"]
    assert "plugin:" in str(e.value)


@pytest.mark.parametrize("value", [None, {1, 2}, b"x", object(), float("nan"), float("inf"), "\ud800"])
def test_values_json_cannot_hold_name_their_key_path(value) -> None:
    with pytest.raises((TypeError, ValueError), match=r"layers\[0\]\.source: conversation\.tools\.t\.concurrency"):
        Policy.resolve([("u", {"conversation": {"tools": {"t": {"concurrency": value}}}})])


def test_a_dict_that_contains_itself_is_refused_with_its_path() -> None:
    tools: dict = {"t": {"concurrency": 1}}
    tools["t"]["again"] = tools
    with pytest.raises(ValueError, match=r"conversation\.tools\.t\.again: the value contains itself"):
        Policy.resolve([("u", {"conversation": {"tools": tools}})])


def test_a_json_text_layer_cites_its_own_lines() -> None:
    text = '{\n  "conversation": {\n    "tools": {\n      "a": { "concurrency": { "key": "k", "limit": "two" } }\n    }\n  }\n}\n'
    with pytest.raises(ConfigError) as e:
        Policy.resolve([("tools.json", text)])
    [d] = e.value.diagnostics
    assert d.code == DiagnosticCode.CONCURRENCY_TYPE and d.path == ["conversation", "tools", "a", "concurrency", "limit"]
    assert (d.labels[0].span.line, d.labels[0].span.column) == (4, 52)
    assert "tools.json:4:52" in d.rendered
    with pytest.raises(ConfigError) as e:
        Policy.resolve([("nulls.json", '{"conversation": null}')])
    [d] = e.value.diagnostics
    assert d.code == DiagnosticCode.JSON_SYNTAX and "null" in d.message


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turnstile_scheduler", *args], capture_output=True, text=True, timeout=60)


def test_check_renders_diagnostics_and_exits_1(tmp_path) -> None:
    plugin = tmp_path / "plugin.toml"
    user = tmp_path / "user.toml"
    plugin.write_text('[conversation.tools.a]\nconcurrency = { key = "g", limit = 4 }\n')
    user.write_text('[conversation.tools.b]\nconcurrency = { key = "g", limit = 2 }\n')
    r = run_check("check", str(plugin), str(user))
    assert r.returncode == 1, r
    assert "error[concurrency-limit-conflict]" in r.stderr and f"{plugin}:2:15" in r.stderr
    assert "1 error in 2 layers" in r.stderr


def test_check_reads_a_json_file_and_cites_its_own_lines(tmp_path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text('{\n  "conversation": {\n    "tools": {\n      "a": { "concurrency": { "key": "k", "limit": "two" } }\n    }\n  }\n}\n')
    r = run_check("check", str(tools))
    assert r.returncode == 1, r
    assert "error[concurrency-type]" in r.stderr and f"{tools}:4:52" in r.stderr


def test_check_lists_the_tools_and_exits_0(tmp_path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[conversation.tools.a]\nconcurrency = 2\nfan_out = true\n')
    r = run_check("check", str(good))
    assert (r.returncode, r.stdout) == (0, "a: key 'a', limit 2, fan-out\n")
    # A key set: every key, in written order, each with its limit.
    sets = tmp_path / "sets.toml"
    sets.write_text(
        '[conversation.tools.mv]\nconcurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}", limit = 1 }]\n'
        "[conversation.tools.free]\n"
    )
    r = run_check("check", str(sets))
    assert (r.returncode, r.stdout) == (0, "mv: keys fs:{src} (limit 1) + fs:{dst} (limit 1)\nfree: unbounded\n")


def test_check_warns_of_typos_and_deny_warnings_fails(tmp_path) -> None:
    typo = tmp_path / "typo.toml"
    typo.write_text('[conversation.tools.rfd_draft]\nconcurency = { key = "rfd" }\n')
    r = run_check("check", str(typo))
    assert r.returncode == 0, r
    assert "warning[unknown-field-typo]" in r.stderr and "did you mean `concurrency`" in r.stderr
    assert "1 warning" in r.stderr
    assert run_check("check", "--deny-warnings", str(typo)).returncode == 1
    good = tmp_path / "good.toml"
    good.write_text("[conversation.tools.a]\nconcurrency = 2\n")
    r = run_check("check", "--deny-warnings", str(good))
    assert r.returncode == 0 and "warning" not in r.stderr, r


def test_policy_warnings_are_typed_and_beside_a_resolved_policy() -> None:
    from turnstile_scheduler import DiagnosticCode, Policy, Severity

    with Policy.resolve([("user", '[conversation.tool.x]\nconcurrency = 1\n')]) as p:
        (w,) = p.warnings()
        assert w.code is DiagnosticCode.UNKNOWN_FIELD_TYPO and w.severity is Severity.WARNING
        assert w.help is not None and "tools" in w.help
        assert w.rendered.startswith("warning[unknown-field-typo]")
    with Policy.resolve([("user", "[conversation.tools.x]\nconcurrency = 1\n")]) as p:
        assert p.warnings() == []


def test_check_help_and_usage_errors() -> None:
    r = run_check("--help")
    assert r.returncode == 0 and "check" in r.stdout
    r = run_check("check", "--help")
    assert r.returncode == 0 and "FILE" in r.stdout
    assert run_check().returncode == 2
    assert run_check("check").returncode == 2
    r = run_check("check", "/nonexistent/turnstile.toml")
    assert r.returncode == 2 and "nonexistent" in r.stderr
