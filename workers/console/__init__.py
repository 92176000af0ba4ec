"""The run console (``agentctl serve``): a web page of runs, approvals and memory for people.

:mod:`workers.console.serve` is the aiohttp server and its JSON API, :mod:`workers.console.auth`
who may use it (also the codec server's gate), :mod:`workers.console.memory_audit` the log of what
people did to memory (written by the console and ``agentctl memory``); ``static/`` holds the page
(plain HTML and JavaScript, no build step).
"""
