"""The methods: one package per problem, the paper's method beside the baselines of its field.

Each package has an ``api`` module holding the names its command calls (``run`` and the checks
a command makes before it): command files in ``icml26/commands/`` reach a package only through
``icml26.methods.<pkg>.api`` and, for settings, through its torch-free config modules
(``config.py`` / ``*_config.py``). A package serving several commands or subcommands gives one
namespace per command there (``exploration.api.bai``, ``diffusion.api.train``).
"""
