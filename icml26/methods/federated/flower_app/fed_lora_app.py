"""Flower App entry points of ``icml26 fed-lora`` (``[tool.flwr.app.components]`` of the
pyproject.toml beside this file): the ServerApp and ClientApp of ``icml26.methods.federated.apps``."""

from icml26.methods.federated.apps import client_app, server_app

__all__ = ["client_app", "server_app"]
