"""SHA-256 without importing ``hashlib`` (whose OpenSSL binding costs ms on the thin path)."""

from __future__ import annotations

try:  # CPython 3.11 ships the builtin as _sha256; 3.12+ as _sha2
    from _sha256 import sha256 as _sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - other interpreters
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        from hashlib import sha256 as _sha256  # type: ignore[assignment,unused-ignore]


def sha256_hex(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return str(_sha256(data).hexdigest())
