"""`invoke nightly` builds and inspects the images `invoke run` is configured with (invoke.yaml or
INVOKE_TF_RECIPES_*), not names of its own."""
from invoke import Config, Context

from ci.nightly import runner
from tasks import host, proving

SITE = {"debian_base": "site/debian:12", "cpu_base": "site/cpu:1", "ngc_base": "site/ngc:25",
        "current_gpu_base": "site/tensorflow-gpu:2", "current_cpu_base": "site/cpu:current", "docker": "site-docker"}


def test_the_nightly_is_given_the_configured_image_names(monkeypatch):
    seen = {}

    def run_night(matrix, tier, only, out, history, dry, command, images, docker_answers):
        seen.update(images=images, docker_answers=docker_answers, tier=tier)
        return 0

    monkeypatch.setattr(runner, "run_night", run_night)
    monkeypatch.setattr(host, "docker_engine_answers", lambda docker: docker == "site-docker")
    proving.nightly.body(Context(Config(overrides={"tf_recipes": SITE})), tier="cpu")
    assert seen == {"images": SITE, "docker_answers": True, "tier": "cpu"}


def test_the_night_looks_for_and_probes_the_configured_images(monkeypatch):
    asked = []
    monkeypatch.setattr(runner, "image_here", lambda images, image: asked.append(image) or image == "site/debian:12")
    assert runner.cpu_base_choice(SITE) == "debian"
    assert asked == ["site/debian:12"]
    commands = []
    monkeypatch.setattr(runner.subprocess, "run",
                        lambda argv, **kw: commands.append(argv) or type("P", (), {"returncode": 0})())
    assert runner.memlock_allowed(SITE)
    assert commands == [["site-docker", "run", "--rm", "--ulimit", "memlock=-1", "site/debian:12", "true"]]
    assert asked[1:] == ["site/cpu:1", "site/debian:12"]  # the configured CPU base first, then the Debian base
