"""``python -m tether.owner KEY READY_FD``: see :mod:`tether.owner.daemon`."""

from tether._nossl import import_asyncio_without_ssl

import_asyncio_without_ssl()  # before anything imports asyncio: see tether._nossl

from tether.owner.daemon import main  # noqa: E402 -- after asyncio, as said

raise SystemExit(main())
