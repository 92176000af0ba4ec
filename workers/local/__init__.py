"""What runs on one machine for development and the demo, beside the library.

The Temporal dev server (:mod:`workers.local.dev_server`, configured by ``temporal-dev.yml``
through :mod:`workers.local.dev_config`), background processes and their pid files
(:mod:`workers.local.procs`, :mod:`workers.local.supervisor`), the demo (``make demo``), the
example MCP server, and the local model server in :mod:`workers.local.model`.
"""
