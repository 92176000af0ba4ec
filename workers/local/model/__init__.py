"""The local model server (``agentctl model-server``): llama.cpp's server with the pinned model.

:mod:`~workers.local.model.server` installs, verifies and serves it;
:mod:`~workers.local.model.files` fetches and checks the model file,
:mod:`~workers.local.model.llama_binary` chooses the server for this CPU: the ``xllamacpp``
wheel through its launcher :mod:`~workers.local.model.wheel_server` (AVX2 x86-64, arm64), or a
``llama-server`` built from source by :mod:`~workers.local.model.llama_build`;
:mod:`~workers.local.model.process` starts, probes and stops it; ``templates/`` holds the
tool-calling chat template.
"""
