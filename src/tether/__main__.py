"""``python -m tether`` is the ``tether`` program."""

from tether.program import main

raise SystemExit(main())
