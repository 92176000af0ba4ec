"""The local model server (``agentctl model-server``): llama-server with the pinned model.

:mod:`~workers.local.model.server` installs, verifies and serves it;
:mod:`~workers.local.model.files` fetches and checks the model file,
:mod:`~workers.local.model.llama_binary` finds or builds (:mod:`~workers.local.model.llama_build`)
the ``llama-server`` binary, :mod:`~workers.local.model.process` starts, probes and stops it;
``templates/`` holds the tool-calling chat template.
"""
