"""``python -m tether`` is the CLI."""

from tether.cli import main

raise SystemExit(main())
