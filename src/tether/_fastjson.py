"""Compact JSON on the thin CLI path without importing ``json`` (and so ``re``).

``import json`` pulls in ``json.decoder``/``json.scanner``, which import ``re`` and compile
patterns: 5-7 ms of a warm ``tether prompt`` whose whole budget is ~60 ms. The C
accelerator that ``json`` itself uses (``_json``) needs none of that, so we drive it
directly: the same scanner and encoder, hence the same results as ``json.loads`` and
``json.dumps(separators=(",", ":"), ensure_ascii=False)``. Where ``_json`` is missing
(another interpreter), we fall back to the ``json`` module.

Only what Tether's wire formats need: ``loads(str)`` for one JSON value per call
(surrounding whitespace allowed), ``dumps(obj)`` compact, UTF-8 kept as is, and NaN /
Infinity rejected on both sides (they are not JSON).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WS = " \t\n\r"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_json: Any
try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None


class _Context:
    """The attributes ``_json.make_scanner`` reads from a ``JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_reject_constant)
    memo: dict[str, str] = {}  # noqa: RUF012 -- the C scanner keeps its own memo


if _json is not None:
    _scan = _json.make_scanner(_Context())
    _encode = _json.make_encoder(
        None,  # markers: None skips the cycle check (our frames are trees)
        None,  # default: unknown types are a bug, not something to serialise
        _json.encode_basestring,  # ensure_ascii=False
        None,  # indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )

    def loads(text: str) -> Any:
        """Decode one JSON value; ``ValueError`` if ``text`` is not exactly that."""
        start = 0
        end = len(text)
        while start < end and text[start] in _WS:
            start += 1
        try:
            value, stop = _scan(text, start)
        except StopIteration as exc:
            raise ValueError(f"invalid JSON at offset {exc.value}") from None
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        except SystemError:
            # The C scanner reports most syntax errors by raising json.decoder's
            # JSONDecodeError, which it looks up in sys.modules without importing it:
            # before anything imported `json`, it returns NULL with no exception set.
            # Bad input is rare, so only then do we pay for the import, and scan again.
            import json.decoder  # noqa: F401 -- imported for the C scanner's sake

            try:
                value, stop = _scan(text, start)
            except StopIteration as exc:
                raise ValueError(f"invalid JSON at offset {exc.value}") from None
        while stop < end and text[stop] in _WS:
            stop += 1
        if stop != end:
            raise ValueError(f"extra data after JSON value at offset {stop}")
        return value

    def dumps(obj: Any) -> str:
        """Encode compactly (``,`` and ``:`` separators, UTF-8 kept, no NaN)."""
        if isinstance(obj, str):
            return str(_json.encode_basestring(obj))
        return "".join(_encode(obj, 0))

else:  # pragma: no cover
    import json as _std

    def loads(text: str) -> Any:
        return _std.loads(text, parse_constant=_reject_constant)

    def dumps(obj: Any) -> str:
        return _std.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def utf8(obj: Any) -> bytes:
    """``dumps(obj)`` as UTF-8 bytes, for anything that crossed a wire.

    JSON may escape a lone surrogate (``"\\ud800"``), and a peer that does -- a broken or
    hostile agent, a client -- hands every reader a ``str`` that UTF-8 cannot encode:
    written strictly, it crashed whoever wrote it next. See :func:`text_utf8`.
    """
    return text_utf8(dumps(obj))


def text_utf8(text: str) -> bytes:
    """JSON text as UTF-8 bytes, a lone surrogate (only ever inside a string) written as
    the JSON escape it came as: ``backslashreplace`` writes exactly ``\\ud800``. The same
    single encode as a strict one whenever there is none."""
    return text.encode("utf-8", "backslashreplace")


def is_text(text: str) -> bool:
    """Whether ``text`` is Unicode text: no lone surrogate, which a peer's JSON escape
    (``"\\ud800"``) or bytes that are not UTF-8 (``surrogateescape``) leave in a ``str``."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def unicode_text(text: str) -> str:
    """JSON text with any lone surrogate written as the JSON escape it came as
    (``\\ud800``): what SQLite and UTF-8 take. (A journal record holding one killed the
    writer thread, leaving every later entry of its session unstored.)"""
    return text if is_text(text) else text_utf8(text).decode()


def loads_unicode(data: bytes) -> Any:
    """One JSON value a peer sent as UTF-8, every string in it Unicode text.

    Raises:
        ValueError: not UTF-8, not one JSON value, nested too deeply, or a string holds a
            lone surrogate escape (``"\\ud800"``: valid JSON, but no text: it could be
            neither stored nor sent on).
    """
    value = loads(data.decode("utf-8"))
    # Only an escape can make a surrogate: look further only when the bytes hold one.
    if (b"\\ud" in data or b"\\uD" in data) and not is_text(dumps(value)):
        raise ValueError("a string holds a lone surrogate escape (\\uD800-\\uDFFF): not text")
    return value
