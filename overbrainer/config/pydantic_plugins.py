"""pydantic without its plugins: the settings are validated by pydantic alone.

pydantic looks up plugins among every installed package's entry points (the ``pydantic``
group) and hands each plugin every validation of a model built while they are on. The
settings hold the Runpod API key and the Hugging Face token, so no plugin of whatever
happens to be installed may watch them; and the lookup (importing ``importlib.metadata``
and reading every package's metadata) costs a fifth of ``config check``.

pydantic's public switch for this is the ``PYDANTIC_DISABLE_PLUGINS`` environment variable,
read each time a model's validator is built. It is set only while the settings' models are
built, then put back as it was, so the processes overbrainer starts (Axolotl among them)
inherit the user's environment unchanged.
"""

import os

SWITCH = "PYDANTIC_DISABLE_PLUGINS"


class PluginsOff:
    """Keeps pydantic's plugins off from creation until :meth:`restore`."""

    def __init__(self) -> None:
        self._before = os.environ.get(SWITCH)
        os.environ[SWITCH] = "__all__"

    def restore(self) -> None:
        if self._before is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = self._before
