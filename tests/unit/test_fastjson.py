"""The thin-path JSON codec agrees with the standard library exactly."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import _fastjson

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@given(JSON)
def test_dumps_matches_json(value: object) -> None:
    """Encoding equals json.dumps(separators=(",", ":"), ensure_ascii=False)."""
    assert _fastjson.dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@given(JSON)
def test_loads_round_trips(value: object) -> None:
    """Decoding what json wrote gives json.loads' value, with surrounding whitespace."""
    text = json.dumps(value)
    assert _fastjson.loads(f" {text}\n") == json.loads(text)


@given(st.text(max_size=40))
def test_loads_accepts_what_json_accepts(text: str) -> None:
    """On arbitrary text, it decodes exactly what json decodes and rejects the rest."""
    try:
        expected = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, RecursionError):
        with pytest.raises(ValueError):
            _fastjson.loads(text)
        return
    assert _fastjson.loads(text) == expected


@pytest.mark.parametrize("bad", ["NaN", "[Infinity]", '{"a":1} x', "", "[1,]", "{'a':1}"])
def test_rejects_non_json(bad: str) -> None:
    """NaN, trailing data, and other non-JSON are errors."""
    with pytest.raises(ValueError):
        _fastjson.loads(bad)


def test_dumps_rejects_nan() -> None:
    """NaN is not JSON, so it is never written."""
    with pytest.raises(ValueError):
        _fastjson.dumps({"x": math.nan})


def test_malformed_input_is_a_value_error_before_json_is_imported() -> None:
    """The C scanner raises json.decoder's error only if `json` was imported already;
    on the thin path it is not, and truncated frames became a SystemError crash."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tether import _fastjson\n"
        "assert 'json.decoder' not in sys.modules\n"
        "for bad in ['{\"a\": \"unterminated', '{\"a\": 1,', '[1, 2', '{\"a\" 1}']:\n"
        "    try:\n"
        "        _fastjson.loads(bad)\n"
        "    except ValueError:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit(f'accepted {bad!r}')\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
