"""Every recipe command the cityscapes-unet README shows exists and accepts the flags it is shown with."""
import re
import shlex
import subprocess
import sys

from helpers import REPO

README = REPO / "recipes" / "cityscapes-unet" / "README.md"


def shown_commands():
    blocks = [block for language, block in re.findall(r"```(\w*)\n(.*?)```", README.read_text(), flags=re.S)
              if language in ("", "bash", "sh", "console")]
    return [shlex.split(line[line.index("python "):]) for block in blocks
            for line in block.replace("\\\n", " ").splitlines()
            if "python recipes/cityscapes-unet/" in line]


def test_readme_shows_the_data_commands():
    scripts = {command[1] for command in shown_commands()}
    assert {"recipes/cityscapes-unet/make_fixture.py", "recipes/cityscapes-unet/prepare_data.py",
            "recipes/cityscapes-unet/benchmark_input.py"} <= scripts


def test_every_shown_command_exists_and_knows_its_flags():
    helps = {}
    for command in shown_commands():
        script = command[1]
        assert (REPO / script).is_file(), script
        if script not in helps:
            result = subprocess.run([sys.executable, script, "--help"], cwd=REPO,
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr
            helps[script] = result.stdout
        for flag in (arg.split("=")[0] for arg in command[2:] if arg.startswith("--")):
            assert flag in helps[script], f"{script} has no {flag}"
