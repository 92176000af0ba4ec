"""What the live channel's settings mean (``workers.config.Settings.live_*``; docs/live-runs.md).

Kept apart so ``workers/config.py`` stays one screenful a concern; ``make docs`` copies them into
docs/environment.md.
"""

ADDRESS = (
    "host:port where a worker serves its live channel (GET /live/RUN_ID: the text deltas and "
    "events of the runs it executes, as Server-Sent Events, for the console and AG-UI; "
    "workers/live_server.py); port 0 picks a free one; off: not served, and watchers then "
    "read through the run's Workflow Stream (Updates and Signals; docs/live-runs.md)"
)
ADVERTISE = (
    "host:port (or URL) others reach the live channel at, put in the worker's identity "
    "(default: the bound address; set it behind NAT or a Service)"
)
SECRET = (
    "shared secret signing the live channel's tokens (HMAC-SHA256); the console and every "
    "worker need the same (default: a random one in <state_dir>/live-secret, mode 0600, "
    "which serves one machine)"
)
