"""``python -m tether.forkserver FD``: see :mod:`tether.forkserver`."""

from tether.forkserver.server import main

raise SystemExit(main())
