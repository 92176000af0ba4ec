"""The run console (``agentctl serve``): a web page of runs, approvals and memory for people.

:mod:`workers.console.serve` builds the aiohttp application and serves it (its entry points:
``build_app``, ``start_server``, ``run_server``); its JSON API's handlers live by job in
:mod:`workers.console.runs`, :mod:`workers.console.events` (the event stream),
:mod:`workers.console.memory` and :mod:`workers.console.suites`, with what they share in
:mod:`workers.console.common`. :mod:`workers.console.auth` is who may use it (also the codec
server's gate), :mod:`workers.console.memory_audit` the log of what people did to memory (written
by the console and ``agentctl memory``); ``static/`` holds the page (plain HTML and JavaScript,
no build step).
"""
