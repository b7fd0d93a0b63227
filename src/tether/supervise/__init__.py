"""Supervision: a policy core with no I/O (run and lease state machines, ownership
verification, reconcile planning) and the shell that carries its decisions out."""
