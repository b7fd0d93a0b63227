"""``python -m tether.owner KEY READY_FD``: see :mod:`tether.owner.daemon`."""

from tether.owner.daemon import main

raise SystemExit(main())
