"""Policy: who may see and do what to which session, decided over the state layer.

* :mod:`tether.policy.visibility` -- who sees which sessions;
* :mod:`tether.policy.ownership` -- who owns a session (its creator, its parent);
* :mod:`tether.policy.requester` -- who is calling (a user, or an agent inside a run);
* :mod:`tether.policy.access` -- the one check every door makes before acting;
* :mod:`tether.policy.cascade` -- which sessions a close or terminate reaches.

Import the modules themselves: this package imports nothing.
"""
