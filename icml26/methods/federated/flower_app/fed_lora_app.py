"""Flower App entry points of ``icml26 fed-lora`` (``[tool.flwr.app.components]`` of the
pyproject.toml beside this file): the ServerApp of ``icml26.methods.federated.deploy`` and the
ClientApp of ``icml26.methods.federated.apps``."""

from icml26.methods.federated.apps import client_app
from icml26.methods.federated.deploy import server_app

__all__ = ["client_app", "server_app"]
