# overbrainer's recipes. Run them through ./dev (`./dev test`, `./dev demo`), which makes
# .venv and installs overbrainer with its dev tools (`just` among them) when needed.

venv := ".venv"
py := venv + "/bin/python"

# List the recipes.
default:
    @just --list

# The test suite (what CI runs).
test *args:
    {{py}} -m pytest {{args}}

# ruff (the checks and the formatting) and mypy (strict on overbrainer/).
lint:
    {{venv}}/bin/ruff check overbrainer tests bench reliability e2e
    {{venv}}/bin/ruff format --check overbrainer tests bench reliability e2e
    {{venv}}/bin/mypy

# The sdist and the wheel, in dist/ (install the wheel with pipx or `uv tool install`).
dist:
    {{py}} -m build --outdir dist

# Speed figures, each beside the floor it is compared with. `./dev bench --quick`: every
# group at small sizes (a minute or so), as CI runs it; `./dev bench cli ssh` picks groups.
bench *args:
    {{py}} -m bench {{args}}

# A whole Runpod run on this machine against a fake Runpod and pod on loopback (no GPU needed).
# `./dev demo cluster`: the run on a fake cluster of two pods, its job across both.
demo target="runpod":
    {{py}} -m overbrainer.testing.demo {{target}}

# A whole training run on this machine with the stand-in trainer (no GPU needed).
demo-local:
    {{py}} -m overbrainer.testing.demo local

# Ctrl-C, crash, fault and bad-input campaigns against the real command; one summary table.
# `just reliability --full` delivers every fault at every checkpoint (much longer).
reliability *args:
    {{py}} -m reliability {{args}}

# The real Axolotl (CPU) through the real overbrainer on local (offline), ssh and runpod.
# Builds its pinned environment once (~4 GiB under .e2e/). `just e2e --full`: every case
# on every target.
e2e *args:
    {{py}} -m e2e {{args}}
