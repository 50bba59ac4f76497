"""No pydantic plugin installed alongside overbrainer sees its settings (they hold the
Runpod key and the Hugging Face token), and none is loaded."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from pydantic_core import SchemaValidator

from overbrainer.cli.main import main
from overbrainer.config.model import Settings

CANARY = "CANARY-5be1d0-plugin-must-not-see"

# A pydantic plugin, found as pydantic finds every plugin: by an entry point of the
# ``pydantic`` group in an installed distribution's metadata. It writes down the name of
# every type whose validator pydantic builds, and every value it validates.
_SPY = """
import os


class _Spy:
    def new_schema_validator(self, schema, schema_type, path, kind, config, settings):
        def seen(value, *args, **kwargs):
            with open(os.environ["SPY_LOG"], "a") as log:
                log.write(repr(value) + "\\n")

        with open(os.environ["SPY_LOG"], "a") as log:
            log.write(f"built {path.name}\\n")
        return type("On", (), {"on_enter": staticmethod(seen)})(), None, None


plugin = _Spy()
"""


def _install_spy(where: Path) -> None:
    (where / "spy_plugin.py").write_text(_SPY)
    info = where / "spy_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")


def _run(code: str, *args: str, path: Path, log: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "PYDANTIC_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(path), *sys.path])
    env["SPY_LOG"] = str(log)
    env["OVERBRAINER_RUNPOD__API_KEY"] = CANARY
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )


_PROBE = """
import sys
from overbrainer.cli.main import main
code = main(sys.argv[1:])
print(code, "spy_plugin" in sys.modules, file=sys.stderr)
"""

# The same settings validated by pydantic as any program would, with its plugins.
_CONTROL = """
import sys
import pydantic
from pydantic import BaseModel, SecretStr

class Runpod(BaseModel):
    api_key: SecretStr

Runpod.model_validate({"api_key": sys.argv[1]})
"""


def test_an_installed_pydantic_plugin_never_sees_the_settings(tmp_path: Path) -> None:
    _install_spy(tmp_path)
    project = tmp_path / "project"
    assert main(["init", str(project)]) == 0
    log = tmp_path / "spy.log"

    # The spy works: pydantic finds it and hands it the values it validates.
    control = _run(_CONTROL, CANARY, path=tmp_path, log=log)
    assert control.returncode == 0, control.stderr
    assert "built Runpod" in log.read_text() and CANARY in log.read_text()
    log.unlink()

    for line in (["config", "check"], ["config", "check", "--json"]):
        done = _run(_PROBE, "-C", str(project), *line, path=tmp_path, log=log)
        # The spy saw nothing; the settings were checked and shown with the key masked;
        # the installed plugin was never loaded.
        assert not log.exists(), log.read_text()
        assert CANARY not in done.stdout + done.stderr
        assert "****" in done.stdout
        assert done.stderr.splitlines()[-1] == "0 False", done.stderr


def test_the_plugin_switch_is_put_back_as_the_user_had_it(tmp_path: Path) -> None:
    # The switch is on only while the settings' models are built: the processes overbrainer
    # starts (Axolotl's among them) see the user's environment, the switch set or not.
    probe = (
        "import os\n"
        "before = os.environ.get('PYDANTIC_DISABLE_PLUGINS')\n"
        "import overbrainer.config.model\n"
        "print(before == os.environ.get('PYDANTIC_DISABLE_PLUGINS'), "
        "os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
    )
    for value in (None, "spy", "1"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYDANTIC_")}
        if value is not None:
            env["PYDANTIC_DISABLE_PLUGINS"] = value
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        assert done.stdout.split() == ["True", str(value)]
    # In this process too, the models were built without a plugin.
    assert type(Settings.__pydantic_validator__) is SchemaValidator


def test_settings_are_checked_the_same_whatever_the_users_plugin_switch(tmp_path: Path) -> None:
    # With the user's own plugin switch set either way, config check says the same.
    project = tmp_path / "project"
    assert main(["init", str(project)]) == 0
    (project / "overbrainer.toml").write_text(
        (project / "overbrainer.toml").read_text() + "\n[store]\nurl = 3\n"
    )
    code = (
        "import os, sys\n"
        "os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'spy'\n"
        "from overbrainer.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    outputs = []
    for program in (code, code.replace("'spy'", "'__all__'")):
        done = _run(
            program,
            "-C",
            str(project),
            "config",
            "check",
            "--json",
            path=tmp_path,
            log=tmp_path / "none.log",
        )
        outputs.append((done.returncode, done.stdout, done.stderr))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == 1 and json.loads(outputs[0][1])["ok"] is False
    assert "store.url" in outputs[0][2]


def test_every_pydantic_model_is_built_while_the_plugins_are_off() -> None:
    # The switch is on only while config/model.py builds its models: a model built anywhere
    # else would be watched by whatever plugin is installed.
    package = Path(__file__).resolve().parents[2] / "overbrainer"
    elsewhere = []
    for source in sorted(package.rglob("*.py")):
        if source == package / "config" / "model.py":
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id in ("BaseModel", "RootModel"))
                or (isinstance(b, ast.Attribute) and b.attr in ("BaseModel", "RootModel"))
                for b in node.bases
            ):
                elsewhere.append(f"{source.relative_to(package)}: {node.name}")
            if isinstance(node, ast.Name) and node.id in ("TypeAdapter", "create_model"):
                elsewhere.append(f"{source.relative_to(package)}: {node.id}")
    assert elsewhere == []
