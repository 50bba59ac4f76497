"""pydantic without its plugins: the settings are validated by pydantic alone.

pydantic looks up plugins among every installed package's entry points (the ``pydantic``
group) when it builds its first model, and hands each plugin every validation. The settings
hold the Runpod API key and the Hugging Face token, so no plugin of whatever happens to be
installed may watch them; and the lookup (importing ``importlib.metadata`` and reading every
package's metadata) costs a fifth of ``config check``.

:func:`without_plugins` puts in pydantic's plugin loader one that finds none, before pydantic
loads its own. pydantic reads the loader only through ``get_plugins`` (a test holds it to
that). It applies to the whole process;
overbrainer has no other pydantic models, and Axolotl runs in a process of its own.
"""

import sys
from types import ModuleType

LOADER = "pydantic.plugin._loader"


def _no_plugins() -> tuple[()]:
    return ()


def without_plugins() -> None:
    """Have pydantic find no plugin, unless its own loader already ran in this process."""
    if LOADER in sys.modules:
        return
    loader = ModuleType(LOADER, "overbrainer: pydantic plugins are not loaded")
    loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
    sys.modules[LOADER] = loader
