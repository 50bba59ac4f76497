"""The configuration layer: ``overbrainer.toml`` under ``OVERBRAINER_*`` variables.

- :mod:`overbrainer.config.model`: the settings models and :func:`is_safe_value`.
- :mod:`overbrainer.config.load`: :func:`load_settings`, :class:`ConfigError`, :func:`masked`.
- :mod:`overbrainer.config.dotenv`: :func:`read_dotenv` for a project's ``.env``.
- :mod:`overbrainer.config.template`: the files ``overbrainer init`` writes.

Nothing is re-exported here, so that importing one light module (``dotenv``) does not
import pydantic.
"""
