"""The ACP client: an async connection driver over a sans-IO JSON-RPC core, plus policy."""
