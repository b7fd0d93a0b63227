"""Placeholder: the CLI lands with `tether exec`."""


def main() -> int:
    return 0
