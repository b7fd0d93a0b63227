"""``python -m tether.testing.mock_agent``: run the mock agent (see the package docstring)."""

import sys

from tether.testing.mock_agent import main

sys.exit(main())
